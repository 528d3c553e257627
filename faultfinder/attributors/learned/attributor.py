"""The `learned` attributor: score every step with a `StepModel`, blame the top step.

The model's scores become a distribution over the blameable steps (softmax); the top
step is blamed, and the agent answering for it (or the agent with the most mass) is the
agent. No LLM is called: an attribution takes milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from faultfinder.attributors.base import AttributeOptions, register
from faultfinder.attributors.learned.blame import (
    agent_scores,
    answerable_agents,
    blameable,
    softmax,
)
from faultfinder.attributors.learned.evidence import (
    CUES,
    DECISIVE,
    DECISIVE_STRENGTH,
    HANDED_ON,
    HANDED_ON_NOTHING,
    RELAYED,
    STRONG,
    USER_WITHHELD,
    Evidence,
    is_tool_answer,
    step_evidence,
    strongest,
)
from faultfinder.attributors.learned.features import run_features
from faultfinder.attributors.learned.step_model import (
    AgentRule,
    StepModel,
    default_model,
    trajectory_group,
)
from faultfinder.attributors.model import Attribution, Candidate, Step, Trajectory

if TYPE_CHECKING:
    from faultfinder.attributors.context import AttributorContext

__all__ = ["LearnedAttributor"]

_CANDIDATES_KEPT = 20


@register("learned")
class LearnedAttributor:
    """Score every step with a trained model; blame the top step (zero LLM calls).

    Configuration: `model` (a `StepModel`) or `model_path` (a JSON file from
    `faultfinder train`), else the context's learned model (the sidecar's
    `FAULTFINDER_LEARNED_MODEL`); default is the packaged model. `AttributeOptions.extra`
    may carry `alpha` for the conformal prediction set (default 0.1; None disables).
    """

    name = "learned"
    cpu_bound = True
    """Pure computation: the sidecar runs it in a worker thread, off its event loop."""

    def __init__(
        self,
        model: StepModel | None = None,
        model_path: str | None = None,
        *,
        context: AttributorContext | None = None,
    ) -> None:
        if model is None and model_path is not None:
            model = StepModel.load(model_path)
        if model is None and context is not None:
            model = context.learned_model
        self.model = model if model is not None else default_model()

    async def attribute(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
        return self.attribute_now(trajectory, options)

    def attribute_now(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
        """The attribution, computed synchronously (it takes milliseconds)."""
        started = time.perf_counter()
        if not trajectory.steps:
            return Attribution.failed(self.name, "the trajectory has no steps")
        group = trajectory_group(trajectory)
        model = self.model.for_group(group)
        use_gt = options.use_ground_truth and trajectory.ground_truth is not None
        features = run_features(trajectory, use_ground_truth=use_gt, prefix_only=model.prefix_only)
        rows = features.rows
        scores = model.score_rows(rows)
        mask = blameable(trajectory.steps, trajectory.declared_roster)
        probabilities = model.distribution(scores, mask)
        steps = trajectory.steps
        ranked = sorted(range(len(steps)), key=lambda i: (-probabilities[i], i))
        order = [i for i in ranked if mask[i]]
        evidence = step_evidence(trajectory, features)
        explained = model.explain(rows, order[0], mask)
        order, overruled = _evidence_first(order, evidence, explained, features.named[order[0]])
        acting = [fact.acting for fact in features.scanner.facts]
        order, withheld_over = _withheld_first(order, evidence, steps, acting)
        overruled = withheld_over if withheld_over is not None else overruled
        stopped = _where_it_stopped(trajectory, order, evidence, acting)
        if stopped is not None:
            order = [stopped, *(i for i in order if i != stopped)]
        top = order[0]
        answerable = answerable_agents(steps, trajectory.declared_roster)
        # The agent rule was chosen on the scores' plain softmax (temperature 1); the
        # model's temperature only shapes the step distribution for the conformal set.
        mass = agent_scores(answerable, softmax(scores, 1.0, mask))
        # A step promoted by what it shows about one participant answers for that one.
        users_own = any(item.kind in USER_WITHHELD for item in evidence[top])
        if model.agent_rule == AgentRule.AGENT_MASS and stopped is None and not users_own:
            agent = max(mass, key=lambda name: mass[name])
        else:
            agent = answerable[top]
        candidates = tuple(
            Candidate(
                step=i,
                agent=answerable[i],
                score=round(probabilities[i], 6),
                evidence="; ".join(item.text for item in evidence[i][:2])
                or f"model score {scores[i]:.3f}",
            )
            for i in order[:_CANDIDATES_KEPT]
        )
        if overruled is not None:
            explained = model.explain(rows, top, mask)
        guess = stopped is None and not any(evidence[i] for i in order)
        confidence = min(1.0, max(0.0, probabilities[top]))
        if guess:
            confidence = min(confidence, 0.1)
        elif stopped is not None:
            confidence = min(confidence, 0.15)
        alpha = options.extra.get("alpha", 0.1)
        prediction_set = None
        conformal = self.model.conformal
        if conformal is not None and alpha is not None:
            prediction_set = conformal.prediction_set(probabilities, float(alpha), group=group)
        return Attribution(
            method=self.name,
            agent=agent,
            step=top,
            reason=_stopped_reason(top, steps[top].agent)
            if stopped is not None
            else _reason(top, steps[top].agent, evidence[top], guess, explained),
            confidence=confidence,
            candidates=candidates,
            prediction_set=prediction_set,
            used_ground_truth=use_gt,
            llm_calls=0,
            latency_s=time.perf_counter() - started,
            details={
                "model": {
                    key: self.model.training[key]
                    for key in ("dataset", "records", "trained_at")
                    if key in self.model.training
                },
                "agent_rule": model.agent_rule,
                "model_group": group if model is not self.model else None,
                "agent_mass": {name: round(value, 6) for name, value in mass.items()},
                "evidence": explained,
                "why": [item.text for item in evidence[top]],
                "guess": guess,
                "stopped_after": stopped,
                "overruled_step": overruled,
                "step_probabilities": [round(p, 6) for p in probabilities],
            },
        )


_POSITIONAL = frozenset({
    "position", "log_position", "relative_position", "log_steps_total", "log_steps_to_end",
    "is_acting", "kind_message", "kind_tool", "kind_handoff", "kind_human", "kind_other",
    "acting_rank", "is_first_acting", "agent_turn", "agent_first_turn", "agent_last_turn",
    "agents_before", "agent_is_first_speaker", "agent_share", "agent_acting_turns",
})  # fmt: skip
"""Features that say where a step sits in the run and whose turn it is, not what it shows."""
_WORDING = frozenset({"task_overlap"})
"""Features that say how much of the task's wording a step repeats: a restatement of the
question is no sign of a mistake, so, like position, it may break ties but never outvote
evidence."""
_NOT_WHAT_IT_SHOWS = _POSITIONAL | _WORDING
"""What `_positional` passes over: a step's place, turn and wording."""


def _positional(
    explained: Sequence[Mapping[str, Any]],
    top: int,
    order: Sequence[int],
    row: Mapping[str, float],
) -> bool:
    """Whether what sets the top step apart is only its place in the run (or nothing):
    features of position and turn-taking, how much of the task's wording it repeats
    (`_WORDING`), the context columns that are empty only because nothing comes before
    the first step (`…_max_before`) or after the last (`…_max_after`), and features whose
    value the step's place alone sets (`row`, the top step's features: see
    `_by_construction`)."""
    first, last = min(order), max(order)
    for item in explained:
        name = str(item["feature"])
        if name.removesuffix("_max_before").removesuffix("_max_after") in _NOT_WHAT_IT_SHOWS:
            continue
        if name.endswith("_max_before") and top == first and not item["value"]:
            continue
        if name.endswith("_max_after") and top == last and not item["value"]:
            continue
        if _by_construction(name, item["value"], row):
            continue
        return False
    return True


_FIRST_TURN_DEFAULTS = {"repetition": 0.0, "loop_count": 0.0, "length_vs_agent": 0.0}
"""Features that compare a step with its agent's earlier steps, and their value on the
agent's first turn, where there is nothing to compare with."""
_NOVELTY = frozenset({"new_words", "new_numbers"})
"""Features that compare a step with everything said before it: on the run's first
acting step, only the task and the user's words came before, so novelty is the rule."""


def _by_construction(name: str, value: object, row: Mapping[str, float]) -> bool:
    """Whether a feature's value at a step is what the step's place alone makes it: a
    comparison with the agent's earlier steps on its first turn, or novelty on the run's
    first acting step."""
    if row.get("agent_first_turn") and _FIRST_TURN_DEFAULTS.get(name) == value:
        return True
    return bool(row.get("is_first_acting")) and name in _NOVELTY


def _evidence_first(
    order: list[int],
    evidence: Sequence[Sequence[Evidence]],
    explained: Sequence[Mapping[str, Any]],
    row: Mapping[str, float],
) -> tuple[list[int], int | None]:
    """The ranking with evidence first: when the top step carries no evidence of its own
    (repeating a figure someone else made up points at them, not at it) and leads only
    by its place in the run (`explained`, the features that set it apart, are all
    positional), while another blameable step carries strong evidence, the best-ranked
    such step leads (the former leader is returned as overruled). A positional habit may
    break ties, never outvote evidence; a lead the model learned from what steps show (a
    team's own labels, say) stands, except against `DECISIVE` evidence, which the run's
    own data proves: it leads over a top step with no evidence of its own, and an earlier
    step carrying it leads over a top step whose own evidence is weaker (what the later
    step got wrong began where the run's own records were first misstated). A simulated
    user's turn that withheld what its instructions give it (`USER_WITHHELD`) leads over
    a top step, before it or after it, whose only evidence is a cue (`CUES`)."""
    top = order[0]
    # A figure-less handover is weighed by `_withheld_first`, not as the step's own.
    own = [item for item in evidence[top] if item.kind not in RELAYED | HANDED_ON_NOTHING]
    proven = [i for i in order if any(item.kind in DECISIVE for item in evidence[i])]
    by_user = [i for i in proven if any(item.kind in USER_WITHHELD for item in evidence[i])]
    if by_user and by_user[0] != top and all(item.kind in CUES for item in own):
        return [by_user[0], *(i for i in order if i != by_user[0])], top
    if not own and proven:
        return [proven[0], *(i for i in order if i != proven[0])], top
    earlier = [i for i in proven if i < top]
    if earlier and max(item.strength for item in own) < DECISIVE_STRENGTH:
        return [earlier[0], *(i for i in order if i != earlier[0])], top
    if own or not _positional(explained, top, order, row):
        return order, None
    backed = [i for i in order if strongest(evidence[i]) >= STRONG]
    if not backed:
        return order, None
    return [backed[0], *(i for i in order if i != backed[0])], top


def _withheld_first(
    order: list[int],
    evidence: Sequence[Sequence[Evidence]],
    steps: Sequence[Step],
    acting: Sequence[bool],
) -> tuple[list[int], int | None]:
    """The ranking with the cause of a figure-less handover first: when the leading step
    belongs to the agent that took over right after a turn that passed on none of the
    figures its own tools had returned (`withheld-figures`), or that left the run to it
    before anything was looked up (`handed-on-nothing`, and no tool answered between the
    two), what that agent then said, made up or gave up on followed from what it was not
    given, and the handing-on turn leads (the former leader is returned as overruled)."""
    top = order[0]
    for relay in range(top - 1, -1, -1):
        kinds = {e.kind for e in evidence[relay]} & HANDED_ON
        if relay not in order or not kinds:
            continue
        others = range(relay + 1, top + 1)
        if kinds <= HANDED_ON_NOTHING and any(is_tool_answer(steps[j]) for j in others):
            return order, None
        giver = steps[relay].agent
        receiver = next((j for j in others if acting[j] and steps[j].agent != giver), None)
        if receiver is not None and steps[receiver].agent == steps[top].agent:
            return [relay, *(i for i in order if i != relay)], top
        return order, None
    return order, None


def _where_it_stopped(
    trajectory: Trajectory,
    order: Sequence[int],
    evidence: Sequence[Sequence[Evidence]],
    acting: Sequence[bool],
) -> int | None:
    """In a run that never finished (the sidecar gave up waiting for its root span:
    metadata `unfinished`) where no step carries evidence, the last acting step: the
    work stopped after it, which says more than any step's place in the run."""
    if not trajectory.metadata.get("unfinished") or any(evidence[i] for i in order):
        return None
    return max((i for i in order if acting[i]), default=None)


def _stopped_reason(top: int, agent: str) -> str:
    return (
        f"step {top} ({agent}): the run never finished, its work stopped after this step"
        " (its root span never arrived: the process crashed, was killed or hung); no step"
        " shows an error, a figure without support, a contradiction or a repetition"
    )


def _reason(
    top: int,
    agent: str,
    evidence: Sequence[Evidence],
    guess: bool,
    explained: Sequence[Mapping[str, Any]],
) -> str:
    features = " (model: " + "; ".join(str(e["text"]) for e in explained) + ")" if explained else ""
    if evidence:
        reason = f"step {top}: {evidence[0].text}"
        if len(evidence) > 1:
            reason += f"; also, {evidence[1].text}"
        return reason + features
    reason = f"step {top} ({agent})"
    if guess:
        reason = (
            "a guess: no step shows an error, a figure without support, a contradiction or a"
            f" repetition; {reason} ranks first by its place in the run"
        )
    else:
        reason += " ranks first on the model's features"
    return reason + features
