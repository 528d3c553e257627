"""The frame every LLM method shares: its model client, accounting, the learned
pre-filter, fitting the log into the context, and validating the answer.

The learned pre-filter (`prefilter_top_k`, off by default) runs the zero-LLM step scorer
first: its top-k steps are named to the model as hints and the log is shrunk around them
(those steps and the step after each in full, the others cut to `prefilter_far_chars`),
in every method where that is natural (all except step-by-step, whose walk visits every
step anyway). The details record the candidates and which model gave them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeAlias, TypeVar

from faultfinder.attributors.base import AttributeOptions
from faultfinder.attributors.learned import (
    LearnedAttributor,
    StepModel,
    blameable,
    default_model,
)
from faultfinder.attributors.llm import prompts, render
from faultfinder.attributors.llm.client import ModelClient, ModelSession
from faultfinder.attributors.llm.replies import (
    ContextOverflow,
    ModelCallFailed,
    Prompt,
    ReplyFormat,
    with_step_owner,
)
from faultfinder.attributors.llm.settings import CHARS_PER_TOKEN, ModelSettings
from faultfinder.attributors.model import Attribution, Candidate, Step, Trajectory, validate_against

__all__ = [
    "PREFILTER_FAR_CHARS",
    "Finding",
    "LLMAttributor",
    "MethodContext",
    "PrefilterModel",
    "Run",
    "blameable_steps",
]

PREFILTER_FAR_CHARS = 400
"""Characters kept of a step far from every pre-filter candidate (start and end)."""

CONTEXT_RETRIES = 4
"""Times a prompt the endpoint refused as too long is shortened and sent again."""

SHRINK_WITHOUT_COUNTS = 0.7
"""Share of the log kept when a context error does not say by how much the prompt overflowed."""

T = TypeVar("T")

PrefilterModel: TypeAlias = StepModel | Callable[[Trajectory], StepModel]
"""The pre-filter's step model: one model, or a function choosing it per trajectory (e.g. the
cross-validation fold model that never saw that trajectory)."""


class MethodContext(Protocol):
    """What an LLM method reads of the service's `AttributorContext`: its model settings,
    the pre-filter's depth and learned model, and clients on the shared endpoints."""

    @property
    def llm(self) -> ModelSettings:
        """The model endpoint and call settings."""

    @property
    def prefilter_top_k(self) -> int:
        """Candidate steps the learned pre-filter names (0: off)."""

    @property
    def learned_model(self) -> StepModel | None:
        """The pre-filter's learned model; None: the packaged one."""

    def client(self, settings: ModelSettings | None = None) -> ModelClient:
        """A model client with `settings` (default: `llm`) on the shared endpoint."""


logger = logging.getLogger(__name__)


@dataclass
class Finding:
    """What a method concluded, before the frame makes it an `Attribution`."""

    agent: str
    step: int
    reason: str
    confidence: float | None = None
    """The method's own measure (the consensus vote's share); None: it has none."""
    candidates: tuple[Candidate, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    suggested_fix: str | None = None


@dataclass
class Run:
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
    refits: list[dict[str, Any]] = field(default_factory=list)
    """Prompts the endpoint refused as too long and that were shortened and sent again."""

    @property
    def task(self) -> str:
        task: str = self.trajectory.task
        return task


class LLMAttributor:
    """Common frame of the LLM methods: the client, accounting, context fitting, validation.

    Configure with a `context` (its model settings, pre-filter depth and learned model, and
    a client on its shared endpoint), `settings` (a `ModelSettings`), a shared `client`, or
    `ModelSettings` fields as keyword arguments
    (`get_attributor("all_at_once", base_url=..., model=...)`); what is given explicitly
    wins over the context.

    The learned pre-filter: `prefilter_top_k` (0 = off; `options.extra["prefilter_top_k"]`
    overrides it per call), `prefilter_model` (default: the context's learned model, else
    the packaged one) and `prefilter_far_chars` (same override in `options.extra`).
    """

    name: str
    """The method's registered name (each method sets it on its class)."""
    completion_factor: ClassVar[int] = 1
    """Multiple of the configured max_tokens this method's replies may need."""
    uses_prefilter: ClassVar[bool] = True
    """Whether the method shows the pre-filter's hints and shrinks its prompts around them."""
    calls_model: ClassVar[bool] = True
    """It asks a model: the workers run it in the model lane (`base.calls_model`)."""

    def __init__(
        self,
        settings: ModelSettings | None = None,
        *,
        client: ModelClient | None = None,
        context: MethodContext | None = None,
        prefilter_top_k: int | None = None,
        prefilter_model: PrefilterModel | None = None,
        prefilter_far_chars: int = PREFILTER_FAR_CHARS,
        **setting_overrides: Any,
    ) -> None:
        if prefilter_top_k is None:
            prefilter_top_k = context.prefilter_top_k if context is not None else 0
        if prefilter_model is None and context is not None:
            prefilter_model = context.learned_model
        for option, value, least in (
            ("prefilter_top_k", prefilter_top_k, 0),
            ("prefilter_far_chars", prefilter_far_chars, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{option} must be a whole number >= {least}, got {value!r}")
        self.prefilter_top_k = prefilter_top_k
        self.prefilter_model = prefilter_model
        self.prefilter_far_chars = prefilter_far_chars
        self._owns_client = client is None and context is None
        if client is None:
            base = settings or (context.llm if context is not None else ModelSettings())
            if setting_overrides:
                base = base.model_copy(update=setting_overrides)
                base = ModelSettings.model_validate(base.model_dump())
            client = context.client(base) if context is not None else ModelClient(base)
        self.client = client
        self.settings = client.settings

    async def aclose(self) -> None:
        """Close the client's connection if this attributor opened it (a context's clients
        are closed by the context, a client passed in by whoever made it)."""
        if self._owns_client:
            await self.client.aclose()

    async def attribute(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
        started = time.monotonic()
        session = self.client.session()
        ground_truth = None
        if options.use_ground_truth and trajectory.ground_truth and trajectory.ground_truth.strip():
            ground_truth = trajectory.ground_truth
        run = Run(trajectory, ground_truth, session, options)

        def common() -> dict[str, Any]:
            details = session.details()
            if run.prefilter:
                details["prefilter"] = run.prefilter
            if run.context:
                details["context_dropped"] = run.context
            if run.refits:
                details["context_refits"] = run.refits
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
        return with_step_owner(attribution, trajectory)

    async def _attribute(self, run: Run) -> Finding:
        raise NotImplementedError

    def _prefilter(self, run: Run) -> None:
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
        # The learned attributor's own ranking (its evidence-first order included).
        learned = LearnedAttributor(model).attribute_now(
            trajectory, AttributeOptions(use_ground_truth=run.ground_truth is not None)
        )
        steps = trajectory.steps
        ranked = learned.candidates[:top_k]
        order = [candidate.step for candidate in ranked]
        probability = {candidate.step: candidate.score for candidate in ranked}
        run.hints = tuple((steps[i].index, render.speaker_label(steps[i])) for i in order)
        run.far_chars = far_chars
        run.prefilter = {
            "top_k": top_k,
            "far_chars": far_chars,
            "model": str(model.training.get("prefilter_source") or "packaged learned model"),
            "candidates": [
                {"step": steps[i].index, "agent": steps[i].agent, "p": round(probability[i], 4)}
                for i in order
            ],
        }

    def fit_prompt(
        self,
        run: Run,
        steps: Sequence[Step],
        build: Callable[[str], Prompt],
        reply: ReplyFormat[Any],
        focus: int | None = None,
        purpose: str = "",
        hinted: bool = True,
    ) -> Prompt:
        """The prompt `build` makes around as much of `steps`' log as the context allows;
        with `hinted` and pre-filter hints, shrunk around the hinted steps among `steps`."""
        prompt, report = self._render(
            run, steps, build, self._log_budget(build, reply), focus, hinted
        )
        if report:
            run.context.append({"prompt": purpose or self.name, **report})
        return prompt

    async def ask_fitted(
        self,
        run: Run,
        steps: Sequence[Step],
        build: Callable[[str], Prompt],
        reply: ReplyFormat[T],
        *,
        focus: int | None = None,
        purpose: str = "",
        hinted: bool = True,
        max_tokens: int | None = None,
    ) -> T:
        """Ask the `fit_prompt` question; when the endpoint still finds it longer than its
        context (the estimate is only an estimate), shorten the log by the overflow it
        reports, or by a fixed share when it reports none, and ask again, at most
        `CONTEXT_RETRIES` times."""
        budget = self._log_budget(build, reply)
        label = purpose or self.name
        for attempt in range(CONTEXT_RETRIES + 1):
            prompt, report = self._render(run, steps, build, budget, focus, hinted)
            try:
                answer = await run.session.ask(prompt, reply, max_tokens=max_tokens)
            except ContextOverflow as exc:
                if attempt == CONTEXT_RETRIES:
                    raise
                budget = self._shorter_budget(exc, prompt, build, reply)
                run.refits.append(
                    {
                        "prompt": label,
                        "requested": exc.requested,
                        "available": exc.available,
                        "log_chars": budget,
                    }
                )
                continue
            if report:
                run.context.append({"prompt": label, **report})
            return answer
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _log_budget(self, build: Callable[[str], Prompt], reply: ReplyFormat[Any]) -> int:
        """Characters of log that fit beside the question, as the endpoint counts tokens."""
        settings = self.settings
        endpoint = self.client.endpoint
        window = min(settings.context_tokens, endpoint.context_tokens or settings.context_tokens)
        skeleton = build("")
        overhead = len(skeleton.system) + len(skeleton.user) + len(reply.json_instructions) + 64
        # Room for the reply, and for a second try that repeats the first reply.
        tokens = window - 2 * settings.max_tokens * self.completion_factor - 64
        return max(int(tokens * endpoint.chars_per_token) - overhead, 0)

    def _shorter_budget(
        self,
        refused: ContextOverflow,
        prompt: Prompt,
        build: Callable[[str], Prompt],
        reply: ReplyFormat[Any],
    ) -> int:
        """A log budget below the refused prompt's log: by the reported overflow (and the
        reply's room) in characters, with the endpoint's counts already learned, or by
        `SHRINK_WITHOUT_COUNTS`."""
        skeleton = build("")
        shown = max(len(prompt.user) - len(skeleton.user), 0)
        if refused.requested is None or refused.available is None:
            return int(shown * SHRINK_WITHOUT_COUNTS)
        reply_room = self.settings.max_tokens * self.completion_factor + 64
        excess = refused.requested - refused.available + reply_room
        by_overflow = shown - int(excess * CHARS_PER_TOKEN * 1.1)
        return max(min(by_overflow, self._log_budget(build, reply), shown - 1), 0)

    @staticmethod
    def _render(
        run: Run,
        steps: Sequence[Step],
        build: Callable[[str], Prompt],
        budget: int,
        focus: int | None,
        hinted: bool,
    ) -> tuple[Prompt, dict[str, Any]]:
        """`build` around the log of `steps` cut to `budget` characters, and what was cut."""
        shown = {step.index for step in steps}
        keep = [step for step, _ in run.hints if step in shown] if hinted else []
        rendered = render.render_log(steps, budget, focus=focus, keep=keep, far_chars=run.far_chars)
        return build(rendered.text), rendered.report()


def blameable_steps(trajectory: Trajectory) -> list[int]:
    """The steps a method may name: not the task giver's turns nor system prompts
    (`learned.blameable`)."""
    steps = trajectory.steps
    roster = trajectory.declared_roster
    return [step.index for step, ok in zip(steps, blameable(steps, roster), strict=True) if ok]
