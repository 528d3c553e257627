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
from faultfinder.attributors.learned.features import step_features
from faultfinder.attributors.learned.step_model import (
    AgentRule,
    StepModel,
    default_model,
    trajectory_group,
)
from faultfinder.attributors.model import Attribution, Candidate, Trajectory

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
        rows = step_features(trajectory, use_ground_truth=use_gt, prefix_only=model.prefix_only)
        scores = model.score_rows(rows)
        mask = blameable(trajectory.steps)
        probabilities = model.distribution(scores, mask)
        steps = trajectory.steps
        ranked = sorted(range(len(steps)), key=lambda i: (-probabilities[i], i))
        order = [i for i in ranked if mask[i]]
        top = order[0]
        answerable = answerable_agents(steps)
        # The agent rule was chosen on the scores' plain softmax (temperature 1); the
        # model's temperature only shapes the step distribution for the conformal set.
        mass = agent_scores(answerable, softmax(scores, 1.0, mask))
        if model.agent_rule == AgentRule.AGENT_MASS:
            agent = max(mass, key=lambda name: mass[name])
        else:
            agent = answerable[top]
        candidates = tuple(
            Candidate(
                step=i,
                agent=answerable[i],
                score=round(probabilities[i], 6),
                evidence=f"model score {scores[i]:.3f}",
            )
            for i in order[:_CANDIDATES_KEPT]
        )
        evidence = model.explain(rows, top, mask)
        alpha = options.extra.get("alpha", 0.1)
        prediction_set = None
        conformal = self.model.conformal
        if conformal is not None and alpha is not None:
            prediction_set = conformal.prediction_set(probabilities, float(alpha), group=group)
        return Attribution(
            method=self.name,
            agent=agent,
            step=top,
            reason=_reason(top, probabilities[top], len(steps), evidence),
            confidence=min(1.0, max(0.0, probabilities[top])),
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
                "evidence": evidence,
                "step_probabilities": [round(p, 6) for p in probabilities],
            },
        )


def _reason(top: int, probability: float, n: int, evidence: Sequence[Mapping[str, Any]]) -> str:
    reason = f"highest model score at step {top} (p={probability:.2f} over {n} steps)"
    if evidence:
        reason += "; what sets it apart: " + "; ".join(str(e["text"]) for e in evidence)
    return reason
