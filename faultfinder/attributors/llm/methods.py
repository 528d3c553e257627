"""The published LLM attribution methods: all-at-once, step-by-step, binary search, hybrid,
A2P (abduct-act-predict) and ECHO-style consensus, each behind the `Attributor` interface.

Every method returns a validated `Attribution` or a failed one with its reason; the
details say which structured-output rung answered and what context was left out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import anyio

from faultfinder.attributors.base import AttributeOptions, register
from faultfinder.attributors.heuristics import FirstError
from faultfinder.attributors.learned import answerable_agents
from faultfinder.attributors.llm import prompts, render
from faultfinder.attributors.llm.client import ModelClient
from faultfinder.attributors.llm.formats import (
    AnalystVote,
    Verdict,
    a2p_format,
    analyst_format,
    decision_format,
    half_format,
    verdict_format,
)
from faultfinder.attributors.llm.frame import (
    Finding,
    LLMAttributor,
    MethodContext,
    Run,
    blameable_steps,
)
from faultfinder.attributors.llm.replies import ModelCallFailed, Prompt, ReplyFormat
from faultfinder.attributors.llm.settings import ModelSettings
from faultfinder.attributors.model import Candidate, normalise_agent

__all__ = [
    "A2P",
    "LLM_METHODS",
    "AllAtOnce",
    "BinarySearch",
    "Consensus",
    "Hybrid",
    "StepByStep",
]

LLM_METHODS = ("all_at_once", "step_by_step", "binary_search", "hybrid", "a2p", "consensus")
"""Names of the attributors in this module: the ones that need a model endpoint."""


T = TypeVar("T")

WholeLogQuestion = Callable[[str, str | None, str, Sequence[prompts.Hint]], Prompt]
"""A prompt builder over the task, the ground truth, the whole log and the hints."""


async def _ask_whole_log(
    attributor: LLMAttributor,
    run: Run,
    question: WholeLogQuestion,
    reply: ReplyFormat[T],
    purpose: str = "",
    max_tokens: int | None = None,
) -> T:
    """`question` asked around as much of the whole log as the context allows."""
    return await attributor.ask_fitted(
        run,
        run.trajectory.steps,
        lambda log: question(run.task, run.ground_truth, log, run.hints),
        reply,
        purpose=purpose,
        max_tokens=max_tokens,
    )


async def _ask_all_at_once(attributor: LLMAttributor, run: Run) -> Verdict:
    reply = verdict_format(run.trajectory, blameable_steps(run.trajectory))
    verdict: Verdict = await _ask_whole_log(
        attributor, run, prompts.all_at_once_prompt, reply, purpose="all_at_once"
    )
    return verdict


async def _is_decisive(attributor: LLMAttributor, run: Run, index: int) -> tuple[bool, str]:
    trajectory = run.trajectory
    step = trajectory.steps[index]
    reply = decision_format()
    decision: tuple[bool, str] = await attributor.ask_fitted(
        run,
        trajectory.steps[: index + 1],
        lambda log: prompts.step_by_step_prompt(
            run.task, run.ground_truth, log, index, render.speaker_label(step)
        ),
        reply,
        focus=index,
        purpose=f"step {index}",
        hinted=False,
    )
    return decision


# --- the methods ------------------------------------------------------------------------


@register("all_at_once")
class AllAtOnce(LLMAttributor):
    """The whole log in one prompt; the model names the agent, its first decisive step and why."""

    name = "all_at_once"

    async def _attribute(self, run: Run) -> Finding:
        verdict = await _ask_all_at_once(self, run)
        return Finding(verdict.agent, verdict.step, verdict.reason)


@register("step_by_step")
class StepByStep(LLMAttributor):
    """Walk the log from the start; at each step ask whether that latest step holds the
    decisive error, and stop at the first yes (at most one call per step)."""

    name = "step_by_step"
    uses_prefilter = False

    async def _attribute(self, run: Run) -> Finding:
        trajectory = run.trajectory
        answering = answerable_agents(trajectory.steps)
        judged = 0
        for index in blameable_steps(trajectory):
            decisive, reason = await _is_decisive(self, run, index)
            judged += 1
            if decisive:
                return Finding(answering[index], index, reason, details={"steps_judged": judged})
        raise ModelCallFailed(f"no step was judged to hold the decisive error ({judged} judged)")


@register("binary_search")
class BinarySearch(LLMAttributor):
    """Show a segment, ask which half holds the decisive error, recurse into it; the agent
    is the one answering for the single step left (about log2(n) calls)."""

    name = "binary_search"

    async def _attribute(self, run: Run) -> Finding:
        steps = run.trajectory.steps
        allowed = blameable_steps(run.trajectory)
        # The search spans the first to the last step that can be blamed (not the task
        # giver's opening turn); a tool's report left at the end answers to its caller.
        lo, hi = allowed[0], allowed[-1]
        path: list[dict[str, Any]] = []
        reason = ""
        reply = half_format()
        while lo < hi:
            mid = (lo + hi) // 2
            upper, reason = await self.ask_fitted(
                run,
                steps[lo : hi + 1],
                partial(self._segment_prompt, run, lo=lo, mid=mid, hi=hi),
                reply,
                purpose=f"steps {lo}-{hi}",
            )
            path.append({"lo": lo, "hi": hi, "half": "upper" if upper else "lower"})
            lo, hi = (lo, mid) if upper else (mid + 1, hi)
        step = steps[lo]
        return Finding(
            answerable_agents(steps)[lo],
            step.index,
            reason or f"the search narrowed the log to step {step.index}",
            details={"search_path": path},
        )

    @staticmethod
    def _segment_prompt(run: Run, log: str, *, lo: int, mid: int, hi: int) -> Prompt:
        return prompts.binary_search_prompt(run.task, run.ground_truth, log, lo, mid, hi, run.hints)


@register("hybrid")
class Hybrid(LLMAttributor):
    """All-at-once picks the agent; step-by-step then walks only that agent's steps.

    When no step of that agent is judged decisive, the all-at-once step is kept.
    """

    name = "hybrid"

    async def _attribute(self, run: Run) -> Finding:
        verdict = await _ask_all_at_once(self, run)
        steps = run.trajectory.steps
        own = [
            index
            for index in blameable_steps(run.trajectory)
            if normalise_agent(steps[index].agent) == normalise_agent(verdict.agent)
        ]
        for index in own:
            decisive, reason = await _is_decisive(self, run, index)
            if decisive:
                return Finding(
                    verdict.agent,
                    index,
                    reason,
                    details={"all_at_once_step": verdict.step, "agent_steps": len(own)},
                )
        return Finding(
            verdict.agent,
            verdict.step,
            verdict.reason,
            details={
                "all_at_once_step": verdict.step,
                "agent_steps": len(own),
                "step_source": "all_at_once (no step of the agent was judged decisive)",
            },
        )


@register("a2p")
class A2P(LLMAttributor):
    """One call: for suspicious steps infer the hidden cause (abduction), the minimal
    correction (action) and the continuation under it (prediction); blame the earliest step
    whose correction saves the run."""

    name = "a2p"
    completion_factor = 2

    async def _attribute(self, run: Run) -> Finding:
        reply = a2p_format(run.trajectory, blameable_steps(run.trajectory))
        answer = await _ask_whole_log(
            self,
            run,
            prompts.a2p_prompt,
            reply,
            max_tokens=self.settings.max_tokens * self.completion_factor,
        )
        candidates: list[Candidate] = []
        seen: set[int] = set()
        for analysis in sorted(answer.analyses, key=lambda a: (not a.saves_run, a.step)):
            if analysis.step in seen:
                continue
            seen.add(analysis.step)
            candidates.append(
                Candidate(
                    step=analysis.step,
                    agent=analysis.agent,
                    score=1.0 if analysis.saves_run else 0.25,
                    evidence=analysis.abduction,
                )
            )
        details: dict[str, Any] = {
            "analyses": [
                {
                    "step": a.step,
                    "agent": a.agent,
                    "abduction": a.abduction,
                    "action": a.action,
                    "prediction": a.prediction,
                    "saves_run": a.saves_run,
                }
                for a in answer.analyses
            ]
        }
        if answer.unusable_analyses:
            details["unusable_analyses"] = answer.unusable_analyses
        chosen = next((a for a in answer.analyses if a.step == answer.verdict.step), None)
        return Finding(
            answer.verdict.agent,
            answer.verdict.step,
            answer.verdict.reason,
            candidates=tuple(candidates),
            details=details,
            suggested_fix=chosen.action if chosen is not None and chosen.action else None,
        )


@register("consensus")
class Consensus(LLMAttributor):
    """ECHO-style: K analysts with different stances each name agent, step, confidence and
    evidence; a confidence-weighted vote decides. Each analyst sees the log built around a
    focus step (full text near it, shortened far from it): `options.extra["focus_step"]`,
    else the pre-filter's top candidate when it is on, else the first-error heuristic's step.

    `analysts` (constructor or `options.extra["analysts"]`) picks K from the stances in
    `prompts.STANCES` (default 3).
    """

    name = "consensus"

    def __init__(
        self,
        settings: ModelSettings | None = None,
        *,
        client: ModelClient | None = None,
        context: MethodContext | None = None,
        analysts: int = 3,
        **options: Any,
    ) -> None:
        super().__init__(settings, client=client, context=context, **options)
        if not 1 <= analysts <= len(prompts.STANCES):
            raise ValueError(
                f"analysts must be between 1 and {len(prompts.STANCES)}, got {analysts}"
            )
        self.analysts = analysts

    async def _attribute(self, run: Run) -> Finding:
        trajectory = run.trajectory
        count = int(run.options.extra.get("analysts", self.analysts))
        stances = list(prompts.STANCES)[: max(1, min(count, len(prompts.STANCES)))]
        focus = await self._focus(run)
        reply = analyst_format(trajectory, blameable_steps(trajectory))
        votes: dict[str, AnalystVote] = {}
        failures: dict[str, str] = {}

        async def consult(stance: str) -> None:
            try:
                votes[stance] = await self.ask_fitted(
                    run,
                    trajectory.steps,
                    lambda log: prompts.analyst_prompt(
                        stance, run.task, run.ground_truth, log, focus, run.hints
                    ),
                    reply,
                    focus=focus,
                    purpose=f"analyst {stance}",
                )
            except ModelCallFailed as exc:
                failures[stance] = exc.reason

        async with anyio.create_task_group() as group:
            for stance in stances:
                group.start_soon(consult, stance)
        if not votes:
            summary = "; ".join(f"{stance}: {reason}" for stance, reason in failures.items())
            raise ModelCallFailed(f"all {len(stances)} analysts failed: {summary}")

        step_weight: dict[int, float] = defaultdict(float)
        agent_weight: dict[str, float] = defaultdict(float)
        evidence: dict[int, str] = {}
        for stance in stances:
            if stance not in votes:
                continue
            vote = votes[stance]
            # A zero-confidence vote still counts a little, so the vote is never empty.
            weight = max(vote.confidence, 0.05)
            step_weight[vote.step] += weight
            agent_weight[vote.agent] += weight
            evidence.setdefault(vote.step, vote.evidence)
        total = sum(step_weight.values())
        step = min(step_weight, key=lambda s: (-step_weight[s], s))
        owner = trajectory.steps[step].agent
        best = max(agent_weight.values())
        leaders = [a for a, w in agent_weight.items() if w == best]
        agent = owner if owner in leaders else leaders[0]
        candidates = tuple(
            Candidate(
                step=s,
                agent=trajectory.steps[s].agent,
                score=step_weight[s] / total,
                evidence=evidence.get(s, ""),
            )
            for s in sorted(step_weight, key=lambda s: (-step_weight[s], s))
        )
        agreeing = [v for v in votes.values() if v.step == step]
        reason = "; ".join(dict.fromkeys(v.evidence for v in agreeing if v.evidence)) or (
            f"{len(agreeing)} of {len(votes)} analysts chose step {step}"
        )
        return Finding(
            agent,
            step,
            reason,
            confidence=step_weight[step] / total,
            candidates=candidates,
            details={
                "focus_step": focus,
                "votes": {
                    stance: {"agent": v.agent, "step": v.step, "confidence": v.confidence}
                    for stance, v in votes.items()
                },
                **({"failed_analysts": failures} if failures else {}),
            },
        )

    async def _focus(self, run: Run) -> int | None:
        requested = run.options.extra.get("focus_step")
        if isinstance(requested, int) and 0 <= requested < len(run.trajectory):
            return requested
        if run.hints:
            top: int = run.hints[0][0]
            return top
        heuristic = await FirstError().attribute(
            run.trajectory, AttributeOptions(use_ground_truth=False)
        )
        step: int | None = heuristic.step
        if step is not None and heuristic.details.get("rule") == "first-error":
            return step
        return None
