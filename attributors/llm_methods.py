"""The published LLM attribution methods: all-at-once, step-by-step, binary search, hybrid,
A2P (abduct-act-predict) and ECHO-style consensus, each behind the `Attributor` interface.

Every method returns a validated `Attribution` or a failed one with its reason; the
details say which structured-output rung answered and what context was left out.

The learned pre-filter (`prefilter_top_k`, off by default) runs the zero-LLM step scorer
first: its top-k steps are named to the model as hints and the log is shrunk around them
(those steps and the step after each in full, the others cut to `prefilter_far_chars`),
in every method where that is natural (all except step-by-step, whose walk visits every
step anyway). The details record the candidates and which model gave them.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, TypeAlias

import anyio

from faultfinder.attributors import prompts
from faultfinder.attributors.base import AttributeOptions, register
from faultfinder.attributors.heuristics import FirstError
from faultfinder.attributors.learned import (
    StepModel,
    answerable_agents,
    blameable,
    blameable_agents,
    default_model,
)
from faultfinder.attributors.llm import (
    CHARS_PER_TOKEN,
    ModelCallFailed,
    ModelClient,
    ModelSession,
    ModelSettings,
    Prompt,
    ReplyFormat,
    ReplyInvalid,
    parse_who_and_when_text,
    resolve_agent,
    resolve_step,
)
from faultfinder.attributors.model import (
    Attribution,
    Candidate,
    Step,
    Trajectory,
    normalise_agent,
    validate_against,
)

__all__ = [
    "A2P",
    "PREFILTER_FAR_CHARS",
    "AllAtOnce",
    "AnalystVote",
    "BinarySearch",
    "Consensus",
    "Hybrid",
    "LLMAttributor",
    "PrefilterModel",
    "StepByStep",
    "Verdict",
]

LLM_METHODS = ("all_at_once", "step_by_step", "binary_search", "hybrid", "a2p", "consensus")
"""Names of the attributors in this module: the ones that need a model endpoint."""

PREFILTER_FAR_CHARS = 400
"""Characters kept of a step far from every pre-filter candidate (start and end)."""

PrefilterModel: TypeAlias = StepModel | Callable[[Trajectory], StepModel]
"""The pre-filter's step model: one model, or a function choosing it per trajectory (e.g. the
cross-validation fold model that never saw that trajectory)."""

logger = logging.getLogger(__name__)


# --- answers and their formats ----------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """A named agent and step with the model's reason."""

    agent: str
    step: int
    reason: str


@dataclass(frozen=True)
class AnalystVote:
    """One consensus analyst's answer."""

    agent: str
    step: int
    confidence: float
    evidence: str


@dataclass(frozen=True)
class _A2PAnalysis:
    step: int
    agent: str
    abduction: str
    action: str
    prediction: str
    saves_run: bool


@dataclass(frozen=True)
class _A2PAnswer:
    verdict: Verdict
    analyses: tuple[_A2PAnalysis, ...]
    unusable_analyses: int


def _text(value: Any, limit: int = 2000) -> str:
    return str(value).strip()[:limit] if value is not None else ""


def _field(data: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if name in data:
            return data[name]
    return None


def _object_schema(properties: dict[str, Any]) -> dict[str, Any]:
    # Strict structured output wants every property required and nothing else allowed.
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _agent_schema(trajectory: Trajectory) -> dict[str, Any]:
    # An enum lets grammar-constrained servers produce only names that can be blamed.
    return {"type": "string", "enum": list(blameable_agents(trajectory))}


def _answering(trajectory: Trajectory, agent: str, step: int) -> str:
    """The agent a reply names, or, when it names someone who cannot be blamed (the task
    giver, a tool whose reports answer to its caller), the agent answering for its step,
    as the learned attributor and first_error name them."""
    if agent in blameable_agents(trajectory):
        return agent
    answering: list[str] = answerable_agents(trajectory.steps)
    return answering[step]


def _step_schema(allowed: Sequence[int]) -> dict[str, Any]:
    return {"type": "integer", "enum": list(allowed)}


def _verdict_format(trajectory: Trajectory, allowed: Sequence[int]) -> ReplyFormat[Verdict]:
    def validate(data: Mapping[str, Any]) -> Verdict:
        agent = resolve_agent(_field(data, "agent", "agent_name", "mistake_agent"), trajectory)
        step = resolve_step(_field(data, "step", "step_number", "mistake_step"), allowed)
        return Verdict(
            _answering(trajectory, agent, step),
            step,
            _text(_field(data, "reason", "reason_for_mistake")),
        )

    return ReplyFormat(
        name="verdict",
        schema=_object_schema(
            {
                "agent": _agent_schema(trajectory),
                "step": _step_schema(allowed),
                "reason": {"type": "string"},
            }
        ),
        json_instructions=prompts.VERDICT_JSON,
        text_instructions=prompts.VERDICT_TEXT,
        parse_text=parse_who_and_when_text,
        validate=validate,
    )


def _parse_yes_no(text: str) -> dict[str, Any]:
    lowered = text.lower()
    marker = lowered.find("decisive error")
    scope = lowered[marker + len("decisive error") :] if marker >= 0 else lowered
    for word in scope.replace(":", " ").replace("*", " ").split():
        cleaned = word.strip(".,;!\"'")
        if cleaned in {"yes", "true"}:
            return {"decisive_error": True, "reason": text.strip()}
        if cleaned in {"no", "false"}:
            return {"decisive_error": False, "reason": text.strip()}
    raise ReplyInvalid("the reply says neither yes nor no")


def _decision_value(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in {"yes", "true", "no", "false"}:
        return value.strip().lower() in {"yes", "true"}
    raise ReplyInvalid(f"'decisive_error' must be true or false, got {value!r}")


def _decision_format() -> ReplyFormat[tuple[bool, str]]:
    def validate(data: Mapping[str, Any]) -> tuple[bool, str]:
        value = _field(data, "decisive_error", "decisive", "answer", "error")
        return _decision_value(value), _text(data.get("reason"))

    return ReplyFormat(
        name="decision",
        schema=_object_schema(
            {"decisive_error": {"type": "boolean"}, "reason": {"type": "string"}}
        ),
        json_instructions=prompts.DECISION_JSON,
        text_instructions=prompts.DECISION_TEXT,
        parse_text=_parse_yes_no,
        validate=validate,
    )


def _parse_half(text: str) -> dict[str, Any]:
    lowered = text.lower()
    marker = lowered.find("half:")
    scope = lowered[marker:] if marker >= 0 else lowered
    positions = {half: scope.find(half) for half in ("upper", "lower", "first", "second")}
    found = {half: at for half, at in positions.items() if at >= 0}
    if not found:
        raise ReplyInvalid("the reply names neither the upper nor the lower half")
    earliest = min(found, key=lambda half: found[half])
    return {"half": earliest, "reason": text.strip()}


def _half_format() -> ReplyFormat[tuple[bool, str]]:
    """Answers (upper?, reason): upper is the earlier half of the segment."""

    def validate(data: Mapping[str, Any]) -> tuple[bool, str]:
        value = _text(data.get("half")).lower()
        if value.startswith(("upper", "first", "earlier")):
            return True, _text(data.get("reason"))
        if value.startswith(("lower", "second", "later")):
            return False, _text(data.get("reason"))
        raise ReplyInvalid(f"'half' must be 'upper' or 'lower', got {data.get('half')!r}")

    return ReplyFormat(
        name="half",
        schema=_object_schema(
            {"half": {"type": "string", "enum": ["upper", "lower"]}, "reason": {"type": "string"}}
        ),
        json_instructions=prompts.HALF_JSON,
        text_instructions=prompts.HALF_TEXT,
        parse_text=_parse_half,
        validate=validate,
    )


def _a2p_format(trajectory: Trajectory, allowed: Sequence[int]) -> ReplyFormat[_A2PAnswer]:
    verdict = _verdict_format(trajectory, allowed)

    def validate(data: Mapping[str, Any]) -> _A2PAnswer:
        analyses: list[_A2PAnalysis] = []
        unusable = 0
        raw = data.get("analyses")
        for item in raw if isinstance(raw, list) else []:
            try:
                if not isinstance(item, dict):
                    raise ReplyInvalid("not an object")
                step = resolve_step(item.get("step"), allowed)
                agent = _answering(
                    trajectory,
                    resolve_agent(item["agent"], trajectory) if item.get("agent") else "",
                    step,
                )
                saves = item.get("saves_run")
                analyses.append(
                    _A2PAnalysis(
                        step=step,
                        agent=agent,
                        abduction=_text(item.get("abduction"), 600),
                        action=_text(item.get("action"), 600),
                        prediction=_text(item.get("prediction"), 600),
                        saves_run=_decision_value(saves) if saves is not None else False,
                    )
                )
            except ReplyInvalid:
                unusable += 1
        saving = [a for a in analyses if a.saves_run]
        if saving or ("agent" not in data and "step" not in data and analyses):
            # The method's own rule: the earliest step whose correction saves the run.
            chosen = min(saving or analyses, key=lambda a: a.step)
            pick = Verdict(chosen.agent, chosen.step, _text(data.get("reason")) or chosen.abduction)
        else:
            pick = verdict.validate(data)
        return _A2PAnswer(pick, tuple(analyses), unusable)

    analysis_schema = _object_schema(
        {
            "step": _step_schema(allowed),
            "agent": _agent_schema(trajectory),
            "abduction": {"type": "string"},
            "action": {"type": "string"},
            "prediction": {"type": "string"},
            "saves_run": {"type": "boolean"},
        }
    )
    return ReplyFormat(
        name="a2p",
        schema=_object_schema(
            {
                "analyses": {"type": "array", "items": analysis_schema},
                "agent": _agent_schema(trajectory),
                "step": _step_schema(allowed),
                "reason": {"type": "string"},
            }
        ),
        json_instructions=prompts.A2P_JSON,
        text_instructions=prompts.A2P_TEXT,
        parse_text=parse_who_and_when_text,
        validate=validate,
    )


def _analyst_format(trajectory: Trajectory, allowed: Sequence[int]) -> ReplyFormat[AnalystVote]:
    def validate(data: Mapping[str, Any]) -> AnalystVote:
        step = resolve_step(_field(data, "step", "step_number"), allowed)
        agent = _answering(
            trajectory, resolve_agent(_field(data, "agent", "agent_name"), trajectory), step
        )
        raw = data.get("confidence", 0.5)
        try:
            confidence = float(raw)
        except (TypeError, ValueError):
            raise ReplyInvalid(f"'confidence' must be a number from 0 to 1, got {raw!r}") from None
        if confidence > 1 and confidence <= 100:
            confidence /= 100
        return AnalystVote(
            agent, step, min(max(confidence, 0.0), 1.0), _text(_field(data, "evidence", "reason"))
        )

    return ReplyFormat(
        name="analyst_vote",
        schema=_object_schema(
            {
                "agent": _agent_schema(trajectory),
                "step": _step_schema(allowed),
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "evidence": {"type": "string"},
            }
        ),
        json_instructions=prompts.ANALYST_JSON,
        text_instructions=prompts.ANALYST_TEXT,
        parse_text=parse_who_and_when_text,
        validate=validate,
    )


# --- the shared frame -------------------------------------------------------------------


@dataclass
class _Finding:
    agent: str
    step: int
    reason: str
    confidence: float = 0.0
    candidates: tuple[Candidate, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    suggested_fix: str | None = None


@dataclass
class _Run:
    """What one attribution works with: the trajectory, what it may show, and its session."""

    trajectory: Trajectory
    ground_truth: str | None
    session: ModelSession
    options: AttributeOptions
    context: list[dict[str, Any]] = field(default_factory=list)
    """What each prompt left out of the log, when anything was."""
    hints: tuple[prompts.Hint, ...] = ()
    """The pre-filter's candidate steps, likeliest first (empty when it is off)."""
    far_chars: int = PREFILTER_FAR_CHARS
    prefilter: dict[str, Any] = field(default_factory=dict)
    """What the pre-filter did, for the details."""

    @property
    def task(self) -> str:
        task: str = self.trajectory.task
        return task


class LLMAttributor:
    """Common frame of the LLM methods: the client, accounting, context fitting, validation.

    Configure with `settings` (a `ModelSettings`), a shared `client`, or `ModelSettings`
    fields as keyword arguments (`get_attributor("all_at_once", base_url=..., model=...)`).

    The learned pre-filter: `prefilter_top_k` (0 = off; `options.extra["prefilter_top_k"]`
    overrides it per call), `prefilter_model` (default: the packaged learned model) and
    `prefilter_far_chars` (same override in `options.extra`).
    """

    name: str
    """The method's registered name (each method sets it on its class)."""
    completion_factor: ClassVar[int] = 1
    """Multiple of the configured max_tokens this method's replies may need."""
    uses_prefilter: ClassVar[bool] = True
    """Whether the method shows the pre-filter's hints and shrinks its prompts around them."""

    def __init__(
        self,
        settings: ModelSettings | None = None,
        *,
        client: ModelClient | None = None,
        prefilter_top_k: int = 0,
        prefilter_model: PrefilterModel | None = None,
        prefilter_far_chars: int = PREFILTER_FAR_CHARS,
        **setting_overrides: Any,
    ) -> None:
        for option, value, least in (
            ("prefilter_top_k", prefilter_top_k, 0),
            ("prefilter_far_chars", prefilter_far_chars, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{option} must be a whole number >= {least}, got {value!r}")
        self.prefilter_top_k = prefilter_top_k
        self.prefilter_model = prefilter_model
        self.prefilter_far_chars = prefilter_far_chars
        if client is None:
            base = settings or ModelSettings()
            if setting_overrides:
                base = base.model_copy(update=setting_overrides)
                base = ModelSettings.model_validate(base.model_dump())
            client = ModelClient(base)
        self.client = client
        self.settings = client.settings

    async def attribute(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
        started = time.monotonic()
        session = self.client.session()
        ground_truth = None
        if options.use_ground_truth and trajectory.ground_truth and trajectory.ground_truth.strip():
            ground_truth = trajectory.ground_truth
        run = _Run(trajectory, ground_truth, session, options)

        def common() -> dict[str, Any]:
            details = session.details()
            if run.prefilter:
                details["prefilter"] = run.prefilter
            if run.context:
                details["context_dropped"] = run.context
            return {
                "used_ground_truth": ground_truth is not None,
                "latency_s": time.monotonic() - started,
                **session.accounting(),
                "details": details,
            }

        try:
            if not trajectory.steps:
                raise ModelCallFailed("the trajectory has no steps")
            self._prefilter(run)
            finding = await self._attribute(run)
        except ModelCallFailed as exc:
            return Attribution.failed(self.name, exc.reason, **common())
        except Exception as exc:
            # A sidecar worker must store a result for every run; the log keeps the trace.
            logger.exception("%s failed on run %s", self.name, trajectory.run_id)
            return Attribution.failed(
                self.name, f"internal error: {type(exc).__name__}: {exc}", **common()
            )
        fields = common()
        fields["details"] = {**fields["details"], **finding.details}
        attribution = Attribution(
            method=self.name,
            agent=finding.agent,
            step=finding.step,
            reason=finding.reason,
            confidence=finding.confidence,
            candidates=finding.candidates,
            suggested_fix=finding.suggested_fix,
            **fields,
        )
        problem = validate_against(attribution, trajectory)
        if problem is not None:
            return Attribution.failed(self.name, f"invalid answer: {problem}", **common())
        return attribution

    async def _attribute(self, run: _Run) -> _Finding:
        raise NotImplementedError

    def _prefilter(self, run: _Run) -> None:
        """Score the steps with the learned model and keep its top k as the run's hints."""
        extra = run.options.extra
        top_k = extra.get("prefilter_top_k", self.prefilter_top_k)
        far_chars = extra.get("prefilter_far_chars", self.prefilter_far_chars)
        for option, value, least in (
            ("prefilter_top_k", top_k, 0),
            ("prefilter_far_chars", far_chars, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ModelCallFailed(
                    f"options.extra[{option!r}] must be a whole number >= {least}, got {value!r}"
                )
        if top_k == 0 or not self.uses_prefilter:
            return
        trajectory = run.trajectory
        source = self.prefilter_model
        model = source(trajectory) if callable(source) else (source or default_model())
        scores = model.score(trajectory, use_ground_truth=run.ground_truth is not None)
        steps = trajectory.steps
        mask = blameable(steps)
        probabilities = model.distribution(scores, mask)
        ranked = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        order = [i for i in ranked if mask[i]][:top_k]
        run.hints = tuple((steps[i].index, prompts.speaker_label(steps[i])) for i in order)
        run.far_chars = far_chars
        run.prefilter = {
            "top_k": top_k,
            "far_chars": far_chars,
            "model": str(model.training.get("prefilter_source") or "packaged learned model"),
            "candidates": [
                {"step": steps[i].index, "agent": steps[i].agent, "p": round(probabilities[i], 4)}
                for i in order
            ],
        }

    def _fit(
        self,
        run: _Run,
        steps: Sequence[Step],
        build: Callable[[str], Prompt],
        reply: ReplyFormat[Any],
        focus: int | None = None,
        purpose: str = "",
        hinted: bool = True,
    ) -> Prompt:
        """The prompt `build` makes around as much of `steps`' log as the context allows;
        with `hinted` and pre-filter hints, shrunk around the hinted steps among `steps`."""
        settings = self.settings
        skeleton = build("")
        overhead = len(skeleton.system) + len(skeleton.user) + len(reply.json_instructions) + 64
        # Room for the reply, and for a second try that repeats the first reply.
        tokens = settings.context_tokens - 2 * settings.max_tokens * self.completion_factor - 64
        budget = int(tokens * CHARS_PER_TOKEN * 0.85) - overhead
        shown = {step.index for step in steps}
        keep = [step for step, _ in run.hints if step in shown] if hinted else []
        rendered = prompts.render_log(
            steps, max(budget, 0), focus=focus, keep=keep, far_chars=run.far_chars
        )
        report = rendered.report()
        if report:
            run.context.append({"prompt": purpose or self.name, **report})
        return build(rendered.text)


def _blameable_steps(trajectory: Trajectory) -> list[int]:
    """The steps a method may name: not the task giver's turns nor system prompts
    (`learned.blameable`)."""
    steps = trajectory.steps
    return [step.index for step, ok in zip(steps, blameable(steps), strict=True) if ok]


async def _ask_all_at_once(attributor: LLMAttributor, run: _Run) -> Verdict:
    trajectory = run.trajectory
    reply = _verdict_format(trajectory, _blameable_steps(trajectory))
    prompt = attributor._fit(
        run,
        trajectory.steps,
        lambda log: prompts.all_at_once_prompt(run.task, run.ground_truth, log, run.hints),
        reply,
        purpose="all_at_once",
    )
    verdict: Verdict = await run.session.ask(prompt, reply)
    return verdict


async def _is_decisive(attributor: LLMAttributor, run: _Run, index: int) -> tuple[bool, str]:
    trajectory = run.trajectory
    step = trajectory.steps[index]
    reply = _decision_format()
    prompt = attributor._fit(
        run,
        trajectory.steps[: index + 1],
        lambda log: prompts.step_by_step_prompt(
            run.task, run.ground_truth, log, index, prompts.speaker_label(step)
        ),
        reply,
        focus=index,
        purpose=f"step {index}",
        hinted=False,
    )
    decision: tuple[bool, str] = await run.session.ask(prompt, reply)
    return decision


# --- the methods ------------------------------------------------------------------------


@register("all_at_once")
class AllAtOnce(LLMAttributor):
    """The whole log in one prompt; the model names the agent, its first decisive step and why."""

    name = "all_at_once"

    async def _attribute(self, run: _Run) -> _Finding:
        verdict = await _ask_all_at_once(self, run)
        return _Finding(verdict.agent, verdict.step, verdict.reason)


@register("step_by_step")
class StepByStep(LLMAttributor):
    """Walk the log from the start; at each step ask whether that latest step holds the
    decisive error, and stop at the first yes (at most one call per step)."""

    name = "step_by_step"
    uses_prefilter = False

    async def _attribute(self, run: _Run) -> _Finding:
        trajectory = run.trajectory
        answering = answerable_agents(trajectory.steps)
        judged = 0
        for index in _blameable_steps(trajectory):
            decisive, reason = await _is_decisive(self, run, index)
            judged += 1
            if decisive:
                return _Finding(answering[index], index, reason, details={"steps_judged": judged})
        raise ModelCallFailed(f"no step was judged to hold the decisive error ({judged} judged)")


@register("binary_search")
class BinarySearch(LLMAttributor):
    """Show a segment, ask which half holds the decisive error, recurse into it; the agent
    is the one answering for the single step left (about log2(n) calls)."""

    name = "binary_search"

    async def _attribute(self, run: _Run) -> _Finding:
        steps = run.trajectory.steps
        allowed = _blameable_steps(run.trajectory)
        # The search spans the first to the last step that can be blamed (not the task
        # giver's opening turn); a tool's report left at the end answers to its caller.
        lo, hi = allowed[0], allowed[-1]
        path: list[dict[str, Any]] = []
        reason = ""
        reply = _half_format()
        while lo < hi:
            mid = (lo + hi) // 2
            prompt = self._fit(
                run,
                steps[lo : hi + 1],
                partial(self._segment_prompt, run, lo=lo, mid=mid, hi=hi),
                reply,
                purpose=f"steps {lo}-{hi}",
            )
            upper, reason = await run.session.ask(prompt, reply)
            path.append({"lo": lo, "hi": hi, "half": "upper" if upper else "lower"})
            lo, hi = (lo, mid) if upper else (mid + 1, hi)
        step = steps[lo]
        return _Finding(
            answerable_agents(steps)[lo],
            step.index,
            reason or f"the search narrowed the log to step {step.index}",
            details={"search_path": path},
        )

    @staticmethod
    def _segment_prompt(run: _Run, log: str, *, lo: int, mid: int, hi: int) -> Prompt:
        return prompts.binary_search_prompt(run.task, run.ground_truth, log, lo, mid, hi, run.hints)


@register("hybrid")
class Hybrid(LLMAttributor):
    """All-at-once picks the agent; step-by-step then walks only that agent's steps.

    When no step of that agent is judged decisive, the all-at-once step is kept.
    """

    name = "hybrid"

    async def _attribute(self, run: _Run) -> _Finding:
        verdict = await _ask_all_at_once(self, run)
        steps = run.trajectory.steps
        own = [
            index
            for index in _blameable_steps(run.trajectory)
            if normalise_agent(steps[index].agent) == normalise_agent(verdict.agent)
        ]
        for index in own:
            decisive, reason = await _is_decisive(self, run, index)
            if decisive:
                return _Finding(
                    verdict.agent,
                    index,
                    reason,
                    details={"all_at_once_step": verdict.step, "agent_steps": len(own)},
                )
        return _Finding(
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

    async def _attribute(self, run: _Run) -> _Finding:
        trajectory = run.trajectory
        reply = _a2p_format(trajectory, _blameable_steps(trajectory))
        prompt = self._fit(
            run,
            trajectory.steps,
            lambda log: prompts.a2p_prompt(run.task, run.ground_truth, log, run.hints),
            reply,
        )
        answer = await run.session.ask(
            prompt, reply, max_tokens=self.settings.max_tokens * self.completion_factor
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
        return _Finding(
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
        analysts: int = 3,
        **options: Any,
    ) -> None:
        super().__init__(settings, client=client, **options)
        if not 1 <= analysts <= len(prompts.STANCES):
            raise ValueError(
                f"analysts must be between 1 and {len(prompts.STANCES)}, got {analysts}"
            )
        self.analysts = analysts

    async def _attribute(self, run: _Run) -> _Finding:
        trajectory = run.trajectory
        count = int(run.options.extra.get("analysts", self.analysts))
        stances = list(prompts.STANCES)[: max(1, min(count, len(prompts.STANCES)))]
        focus = await self._focus(run)
        reply = _analyst_format(trajectory, _blameable_steps(trajectory))
        votes: dict[str, AnalystVote] = {}
        failures: dict[str, str] = {}

        async def consult(stance: str) -> None:
            prompt = self._fit(
                run,
                trajectory.steps,
                lambda log: prompts.analyst_prompt(
                    stance, run.task, run.ground_truth, log, focus, run.hints
                ),
                reply,
                focus=focus,
                purpose=f"analyst {stance}",
            )
            try:
                votes[stance] = await run.session.ask(prompt, reply)
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
        return _Finding(
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

    async def _focus(self, run: _Run) -> int | None:
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
