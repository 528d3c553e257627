"""Online auditor: score each new step of a still-running trajectory and alarm at a likely culprit.

Uses the learned model's prefix-only scorer (features of step i depend on steps 0..i
only) and the alarm threshold chosen on training data. A step is alarmed on only when it
shows evidence of an error itself (`features.shows_evidence`: an error, a figure or name
nothing observed supports, a contradiction, invented data, giving up, repetition): a
score that is high for where a step sits is no alarm. Pure and incremental: each call
scores only the steps that arrived since the previous call for that run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from faultfinder.attributors.learned import (
    StepModel,
    answerable_agents,
    blameable,
    can_be_blamed,
    default_model,
    trajectory_group,
)
from faultfinder.attributors.learned.evidence import step_evidence
from faultfinder.attributors.learned.features import PrefixScanner, RunFeatures, shows_evidence
from faultfinder.attributors.model import Step, Trajectory

__all__ = ["MODEL_FEATURES", "Alarm", "Auditor", "standing"]

MODEL_FEATURES = " The model's features that set it apart so far: "
"""Opens the last sentence of an alarm's reason, the model's own terms (the run page
shows it behind a toggle)."""


def standing(scores: Sequence[float], score: float, threshold: float) -> str:
    """Where a step's score and the alarm line stand among the run's steps seen so far
    (`scores`, the step's own included), in percentiles: the raw scores of different
    frameworks' models are on scales of their own, a rank among the run's own steps is
    on one scale for every run."""
    others = len(scores) - 1
    if others < 1:
        return "it is the only step seen so far"
    below = sum(other < score for other in scores)
    line = round(100 * sum(other <= threshold for other in scores) / len(scores))
    return (
        f"its score is higher than {below} of the {others} other steps seen so far"
        f" (percentile {round(100 * below / others)}), and the alarm line sits at"
        f" percentile {line} of the {len(scores)} steps"
    )


@dataclass(frozen=True)
class Alarm:
    """A step that looks like the run's decisive error, raised while the run was in progress."""

    run_id: str
    step: int
    agent: str
    """The agent answering for the step (for a tool's report, the agent that called it)."""
    score: float
    threshold: float
    steps_seen: int
    """How many steps of the run had arrived when the alarm was raised."""
    reason: str = ""
    """Why the step: the prefix scorer's evidence (`StepModel.explain`) over the steps
    seen so far."""
    created_at: float | None = None
    """When the alarm was stored (Unix seconds); None until then. The one alarm type: the
    sidecar stores it (`AlarmStore`), announces it and answers it in its API as is."""


@dataclass
class _RunState:
    scanner: PrefixScanner
    ground_truth: str | None
    steps: list[Step] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    alarm: Alarm | None = None


class Auditor:
    """Watches growing trajectories; `observe(prefix)` returns an `Alarm` or None.

    `model` is a prefix-only `StepModel` with an `alarm_threshold`, or a full model
    that carries one as `.auditor` (the packaged default does). A run whose trace names
    its framework uses that framework's threshold when the model has one
    (`alarm_thresholds`); an explicit `threshold` applies to every run. Each run raises
    at most one alarm (the first step above its threshold) unless `alarm_once` is False.
    """

    def __init__(
        self,
        model: StepModel | None = None,
        *,
        threshold: float | None = None,
        use_ground_truth: bool = True,
        alarm_once: bool = True,
    ) -> None:
        model = model if model is not None else default_model()
        if not model.prefix_only:
            if model.auditor is None:
                raise ValueError("the model has no prefix-only auditor model")
            model = model.auditor
        chosen = threshold if threshold is not None else model.alarm_threshold
        if chosen is None:
            raise ValueError("no alarm threshold: pass one or use a model trained with one")
        self.model = model
        self.threshold = chosen
        """The pooled threshold (or the explicit one)."""
        self._explicit = threshold is not None
        self.use_ground_truth = use_ground_truth
        self.alarm_once = alarm_once
        self._runs: dict[str, _RunState] = {}

    def observe(self, trajectory_prefix: Trajectory) -> Alarm | None:
        """Score the steps that are new since the last call for this run; alarm on the first
        one above the threshold. A prefix that does not extend the previous one (a step
        changed or disappeared) restarts the run's state."""
        run_id = trajectory_prefix.run_id
        state = self._runs.get(run_id)
        steps = trajectory_prefix.steps
        ground_truth = trajectory_prefix.ground_truth if self.use_ground_truth else None
        if state is None or not self._extends(state, steps, ground_truth):
            state = _RunState(
                PrefixScanner(trajectory_prefix.task, ground_truth, use_ground_truth=True),
                ground_truth,
            )
            self._runs[run_id] = state
        raised: Alarm | None = None
        threshold = self.threshold_for(trajectory_prefix)
        for step in steps[len(state.steps) :]:
            state.scanner.push(step)
            state.steps.append(step)
            index = step.index
            score = self.model.scorer.score(state.scanner.prefix_row(index))
            state.scores.append(score)
            if (
                raised is None
                and score > threshold
                and can_be_blamed(step)
                and shows_evidence(state.scanner.rows[index])
            ):
                if self.alarm_once and state.alarm is not None:
                    continue
                raised = Alarm(
                    run_id=run_id,
                    step=index,
                    agent=answerable_agents(state.steps)[index],
                    score=score,
                    threshold=threshold,
                    steps_seen=len(steps),
                    reason=self._reason(state, index, score, threshold),
                )
                state.alarm = state.alarm or raised
        return raised

    def _reason(self, state: _RunState, index: int, score: float, threshold: float) -> str:
        rows = [state.scanner.prefix_row(i) for i in range(index + 1)]
        mask = blameable(state.steps[: index + 1])
        explained = self.model.explain(rows, index, mask)
        agent = answerable_agents(state.steps)[index]
        reason = (
            f"Step {index} ({agent}) raised the alarm: {standing(state.scores, score, threshold)}."
        )
        shown = step_evidence(
            Trajectory(
                run_id="prefix", task=state.scanner.task, steps=tuple(state.steps[: index + 1])
            ),
            RunFeatures(rows=rows, named=state.scanner.rows, scanner=state.scanner),
            complete=False,
        )[index]
        if shown:
            reason += f" {shown[0].text[0].upper()}{shown[0].text[1:]}."
        if explained:
            reason += MODEL_FEATURES + "; ".join(e["text"] for e in explained) + "."
        elif sum(mask) <= 1:
            reason += " No earlier step to compare it with."
        return reason

    def threshold_for(self, trajectory: Trajectory) -> float:
        """The alarm threshold that applies to `trajectory`'s run."""
        if self._explicit:
            return self.threshold
        chosen = self.model.threshold_for(trajectory_group(trajectory))
        return chosen if chosen is not None else self.threshold

    @staticmethod
    def _extends(state: _RunState, steps: tuple[Step, ...], ground_truth: str | None) -> bool:
        if ground_truth != state.ground_truth or len(steps) < len(state.steps):
            return False
        # Comparing the last few steps catches a restarted run without O(n) work per call.
        recent = range(max(0, len(state.steps) - 3), len(state.steps))
        return all(steps[i] == state.steps[i] for i in recent)

    def scores(self, run_id: str) -> list[float]:
        """The prefix scores of the run's steps seen so far."""
        state = self._runs.get(run_id)
        return list(state.scores) if state else []

    def alarm(self, run_id: str) -> Alarm | None:
        """The run's first alarm, if any."""
        state = self._runs.get(run_id)
        return state.alarm if state else None

    def forget(self, run_id: str) -> None:
        """Drop a finished run's state."""
        self._runs.pop(run_id, None)
