"""A run of the agent system: `with run(task=…) as r:` records the root span every step
of the run hangs under, and its verdict (`r.succeed()`, `r.fail()`).
"""

from __future__ import annotations

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from faultfinder import conventions as c
from faultfinder.sdk.attributes import record_error, text_messages
from faultfinder.sdk.recording import RUN_KEY, STEP_KEY, Scope, clock, tracer

__all__ = ["Run", "current_run", "run"]


class Run(Scope):
    """One run of the agent system: the root span every step of the run hangs under.

    Mark the verdict with `succeed()` / `fail()`; an exception escaping the block marks
    the run failed (and is re-raised). Query the sidecar later with `run_id`.
    """

    def __init__(
        self,
        task: str,
        *,
        ground_truth: str | None = None,
        run_id: str | None = None,
        framework: str | None = None,
        simulated_user: bool = False,
        user_instruction: str | None = None,
    ) -> None:
        super().__init__()
        self.task = task
        self.simulated_user = simulated_user
        self.user_instruction = user_instruction
        self.ground_truth = ground_truth
        self.explicit_run_id = run_id
        self.framework = framework
        self.outcome: str | None = None
        """`success` / `failure` once decided in the block."""

    def _start(self) -> tuple[Span, Context]:
        attributes: dict[str, str | bool] = {
            c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_WORKFLOW,
            c.RUN_TASK: self.task,
            c.GEN_AI_INPUT_MESSAGES: text_messages("user", [self.task]),
        }
        optional = {
            c.RUN_GROUND_TRUTH: self.ground_truth,
            c.RUN_ID: self.explicit_run_id,
            c.RUN_FRAMEWORK: self.framework,
        }
        attributes.update({key: value for key, value in optional.items() if value is not None})
        if self.simulated_user:
            attributes[c.RUN_SIMULATED_USER] = True
            if self.user_instruction:
                attributes[c.RUN_USER_INSTRUCTION] = self.user_instruction
        # A run is always the root of its own trace (the sidecar's unit of a run); an
        # enclosing span, e.g. the web request that started it, is kept as a link.
        enclosing = trace.get_current_span().get_span_context()
        span = tracer().start_span(
            c.OP_INVOKE_WORKFLOW if self.framework is None else f"invoke_workflow {self.framework}",
            context=Context(),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=[Link(enclosing)] if enclosing.is_valid else None,
            start_time=clock.now(),
        )
        ctx = trace.set_span_in_context(span)
        ctx = otel_context.set_value(RUN_KEY, self, ctx)
        ctx = otel_context.set_value(STEP_KEY, None, ctx)
        return span, ctx

    @property
    def run_id(self) -> str:
        """The id the sidecar knows the run by: the explicit `run_id`, else the trace id."""
        return self.explicit_run_id if self.explicit_run_id is not None else self.trace_id

    def fail(self, reason: str | None = None, *, final_answer: str | None = None) -> None:
        """Mark the run failed (root status ERROR, `faultfinder.run.outcome=failure`)."""
        span = self._live_span()
        self.outcome = "failure"
        span.set_attribute(c.RUN_OUTCOME, "failure")
        if reason is not None:
            span.set_attribute(c.RUN_OUTCOME_REASON, reason)
        if final_answer is not None:
            span.set_attribute(c.RUN_FINAL_ANSWER, final_answer)
        span.set_status(Status(StatusCode.ERROR, reason or "run failed"))

    def succeed(self, final_answer: str | None = None) -> None:
        """Mark the run successful, with the answer it produced."""
        span = self._live_span()
        self.outcome = "success"
        span.set_attribute(c.RUN_OUTCOME, "success")
        if final_answer is not None:
            span.set_attribute(c.RUN_FINAL_ANSWER, final_answer)
        # The status stays UNSET: OpenTelemetry freezes an OK status, and a later
        # exception in the block must still be able to mark the run failed.

    def answer(self, final_answer: str) -> None:
        """Record the run's answer without a verdict (grade it later with `post_outcome`)."""
        self._live_span().set_attribute(c.RUN_FINAL_ANSWER, final_answer)

    def _finish(self, span: Span, exc: BaseException | None) -> None:
        if exc is None:
            return
        description = record_error(span, exc)
        if self.outcome != "failure":
            self.outcome = "failure"
            span.set_attribute(c.RUN_OUTCOME, "failure")
            span.set_attribute(c.RUN_OUTCOME_REASON, description)


def run(
    task: str,
    *,
    ground_truth: str | None = None,
    run_id: str | None = None,
    framework: str | None = None,
    simulated_user: bool = False,
    user_instruction: str | None = None,
) -> Run:
    """`with run(task=…) as r:` — record one run of the agent system (the root span).

    `simulated_user=True` says the user is simulated and part of the system under test
    (an evaluation harness's user simulator): its turns may then be blamed;
    `user_instruction`, the simulator's own instructions, lets a turn that withholds what
    they give it (a user id it was told) be blamed on the user."""
    return Run(
        task,
        ground_truth=ground_truth,
        run_id=run_id,
        framework=framework,
        simulated_user=simulated_user,
        user_instruction=user_instruction,
    )


def current_run() -> Run | None:
    """The run whose block the caller is in (in this thread or asyncio task), if any."""
    value = otel_context.get_value(RUN_KEY)
    return value if isinstance(value, Run) else None


def run_attributes() -> dict[str, str]:
    """The explicit run id of the current run, for the attributes of a step's span."""
    current = current_run()
    if current is not None and current.explicit_run_id is not None:
        return {c.RUN_ID: current.explicit_run_id}
    return {}


class RunIdStamp(SpanProcessor):
    """Copies an explicit run id onto every span started inside that run, including
    spans of other instrumentations, so the sidecar files them under the same run."""

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        current = otel_context.get_value(RUN_KEY, parent_context)
        if not isinstance(current, Run) or current.explicit_run_id is None:
            return
        if span.attributes is None or c.RUN_ID not in span.attributes:
            span.set_attribute(c.RUN_ID, current.explicit_run_id)
