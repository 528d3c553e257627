"""The `learned` attributor: score every step with a `StepModel`, blame the top step.

The model's scores become a distribution over the blameable steps (softmax); the top
step, once the steps' own evidence has had its say (`Decision`), is blamed, and the agent
answering for it (or the agent with the most mass) is the agent. No LLM is called: an
attribution takes milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol

from faultfinder.attributors.base import AttributeOptions, register
from faultfinder.attributors.learned.blame import (
    agent_scores,
    answerable_agents,
    blameable,
    softmax,
)
from faultfinder.attributors.learned.evidence import (
    HANDED_ON,
    HANDED_ON_NOTHING,
    STRONG,
    USER_WITHHELD,
    Evidence,
    is_tool_answer,
    own_evidence,
    step_evidence,
    tier,
)
from faultfinder.attributors.learned.features import run_features
from faultfinder.attributors.learned.reasons import evidence_reason, stopped_reason
from faultfinder.attributors.learned.step_model import (
    AgentRule,
    StepModel,
    default_model,
    trajectory_group,
)
from faultfinder.attributors.model import Attribution, Candidate, Step, Trajectory

__all__ = [
    "DEFAULT_DECISION",
    "OUTCOME_ONLY",
    "Decision",
    "LearnedAttributor",
    "LearnedModelSource",
]


class Decision(StrEnum):
    """How a step's own evidence and the model's scores share the choice of the blamed
    step (`_evidence_first`). Evidence bands (`evidence.tier`): 3 decisive (what the
    run's data proves, the error it ended on), 2 strong, 1 a cue, 0 none."""

    EVIDENCE_BANDS = "evidence-bands"
    """Steps ranked by band, the model's order kept within each: evidence always leads."""
    BARE_LEAD_YIELDS = "bare-lead-yields"
    """Decisive evidence leads; otherwise the model's order stands, except that a leader
    with no evidence of its own yields to the best-scored step with strong evidence."""
    BARE_LEAD_YIELDS_TO_SPECIFIC = "bare-lead-yields-to-specific"
    """As `BARE_LEAD_YIELDS`, but the leader yields only to strong evidence of what a step
    did wrong in the run's own data (a figure, an argument or a call nothing supports, an
    error, a contradicted report), not to evidence that only says where the wrong result
    surfaced (`OUTCOME_ONLY`)."""
    DECISIVE_ONLY = "decisive-only"
    """The model's order stands; only decisive evidence leads."""


OUTCOME_ONLY = frozenset({"first-to-state-final-answer", "contradicts-ground-truth"})
"""Evidence read from the outcome, not from what the step did: the first statement of the
wrong final answer, the first figures none of which is the correct answer. A run's
mistake surfaces at or after the step that made it, so these mark a symptom as often as
the mistake itself."""


class LearnedModelSource(Protocol):
    """What the learned attributor reads of the service's `AttributorContext`: the model
    the sidecar was configured with (None: the packaged one)."""

    @property
    def learned_model(self) -> StepModel | None:
        """The configured learned model, or None."""


_CANDIDATES_KEPT = 20

DEFAULT_DECISION = Decision.BARE_LEAD_YIELDS
"""The decision the attributor takes unless told otherwise: the variant written before any
figure was seen. `BARE_LEAD_YIELDS_TO_SPECIFIC` scores higher on Who&When, but its exception
was written after reading which Who&When runs moved, so its figure there is not a clean
estimate (reports/learned.md)."""
_DECISIVE_BAND, _STRONG_BAND, _NO_EVIDENCE = 3, 2, 0
"""`evidence.tier`'s bands: decisive, strong, none."""


@register("learned")
class LearnedAttributor:
    """Score every step with a trained model; blame the top step (zero LLM calls).

    Configuration: `model` (a `StepModel`) or `model_path` (a JSON file from
    `faultfinder train`), else the context's learned model (the sidecar's
    `FAULTFINDER_LEARNED_MODEL`); default is the packaged model. `decision`: how evidence
    and the model's scores share the choice (`Decision`; default `DEFAULT_DECISION`).
    `AttributeOptions.extra` may carry `alpha` for the conformal prediction set (default
    0.1; None disables).
    """

    name = "learned"
    cpu_bound = True
    """Pure computation: the sidecar runs it in a worker thread, off its event loop."""

    def __init__(
        self,
        model: StepModel | None = None,
        model_path: str | None = None,
        *,
        context: LearnedModelSource | None = None,
        decision: Decision | None = None,
    ) -> None:
        if model is None and model_path is not None:
            model = StepModel.load(model_path)
        if model is None and context is not None:
            model = context.learned_model
        self.model = model if model is not None else default_model()
        self.decision = decision if decision is not None else DEFAULT_DECISION

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
        order, overruled = _evidence_first(order, evidence, self.decision)
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
        explained = model.explain(rows, top, mask)
        basis = _basis(evidence[top], stopped is not None, withheld_over is not None)
        guess = basis == "guess"
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
            reason=stopped_reason(top, steps[top].agent)
            if stopped is not None
            else evidence_reason(top, steps[top].agent, evidence[top], guess, explained),
            basis=basis,
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
                "decision": str(self.decision),
                "model_group": group if model is not self.model else None,
                "agent_mass": {name: round(value, 6) for name, value in mass.items()},
                "model_features": explained,
                "why": [item.text for item in evidence[top]],
                "evidence_bands": [tier(items) for items in evidence],
                "guess": guess,
                "stopped_after": stopped,
                "overruled_step": overruled,
                "step_probabilities": [round(p, 6) for p in probabilities],
            },
        )


def _evidence_first(
    order: list[int],
    evidence: Sequence[Sequence[Evidence]],
    decision: Decision | None = None,
) -> tuple[list[int], int | None]:
    """The ranking once evidence has had its say (`Decision`, default `DEFAULT_DECISION`);
    the former leader is returned as overruled when another step now leads. Under every
    decision the best-scored step with decisive evidence leads over a leader whose own
    evidence is weaker, since the run's own data proves it. Under `EVIDENCE_BANDS` the
    steps are then ranked in bands of their own evidence's strength (`evidence.tier`),
    the model's order kept within each band; under `BARE_LEAD_YIELDS` a leader with no
    evidence of its own yields to the best-scored step with strong evidence, since a score
    alone names no mistake and strong evidence names one; under `DECISIVE_ONLY` the
    model's order stands. Evidence that answers to another step (a relayed figure, a
    report's error: `POINTS_ELSEWHERE`) is not the step's own."""
    decision = DEFAULT_DECISION if decision is None else decision
    bands = {i: tier(evidence[i]) for i in order}
    if decision == Decision.EVIDENCE_BANDS:
        ranked = sorted(order, key=lambda i: -bands[i])
        return ranked, (order[0] if ranked[0] != order[0] else None)
    top = order[0]
    decisive = next((i for i in order if bands[i] == _DECISIVE_BAND), None)
    lead: int | None = None
    if decisive is not None and bands[top] < _DECISIVE_BAND:
        lead = decisive
    elif decision == Decision.BARE_LEAD_YIELDS and bands[top] == _NO_EVIDENCE:
        lead = next((i for i in order if bands[i] >= _STRONG_BAND), None)
    elif decision == Decision.BARE_LEAD_YIELDS_TO_SPECIFIC and bands[top] == _NO_EVIDENCE:
        lead = next((i for i in order if _specific(evidence[i]) >= STRONG), None)
    if lead is None or lead == top:
        return order, None
    return [lead, *(i for i in order if i != lead)], top


def _specific(items: Sequence[Evidence]) -> float:
    """The strength of a step's own evidence of what it did wrong (not `OUTCOME_ONLY`)."""
    return max(
        (item.strength for item in own_evidence(items) if item.kind not in OUTCOME_ONLY),
        default=0.0,
    )


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


def _basis(evidence: Sequence[Evidence], stopped: bool, handed_on: bool) -> str:
    """What the blamed step rests on (`Attribution.basis`): where the work of an
    unfinished run stopped, a handover that left the next agent without what it needed,
    the family of the step's strongest own evidence, else a guess."""
    if stopped:
        return "unfinished"
    if handed_on:
        return next((item.kind for item in evidence if item.kind in HANDED_ON), "guess")
    own = own_evidence(evidence)
    return own[0].kind if own else "guess"
