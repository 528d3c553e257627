"""The steps of a run: agent turns (`agent_step`), tool calls (`tool_call`), and the
instant steps `handoff` and `message`, each one span in the order the program made them.
"""

from __future__ import annotations

import threading
from typing import Self

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind

from faultfinder import conventions as c
from faultfinder.sdk.attributes import (
    as_text,
    describe,
    is_step_error,
    mark_as_step_error,
    record_error,
    role_messages,
    text_messages,
)
from faultfinder.sdk.recording import STEP_KEY, Scope, clock, tracer
from faultfinder.sdk.runs import run_attributes

__all__ = [
    "AgentStep",
    "ToolCall",
    "agent_step",
    "current_step",
    "handoff",
    "message",
    "tool_call",
]


class AgentStep(Scope):
    """One turn of an agent (`invoke_agent` span); `say()` records what it answered.

    A turn that contains no other step is one step of the trajectory. A turn that
    contains steps (tool calls, handoffs, nested agents) is their container: each of
    its `say()` texts then becomes a message step of its own, at the time it was said,
    so the trajectory reads say → tool → say in the order things happened.
    """

    def __init__(
        self,
        name: str,
        content: str | None = None,
        *,
        input: str | None = None,
        agent_id: str | None = None,
    ) -> None:
        super().__init__()
        if not name or not name.strip():
            raise ValueError("agent_step needs the agent's name")
        self.name = name
        self.agent_id = agent_id
        self._initial_content = content
        self._initial_input = input
        self._said: list[tuple[int, str]] = []
        self._inputs: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._has_child_steps = False

    def _start(self) -> tuple[Span, Context]:
        _note_step_started()
        attributes = {
            c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT,
            c.GEN_AI_AGENT_NAME: self.name,
            **run_attributes(),
        }
        if self.agent_id is not None:
            attributes[c.GEN_AI_AGENT_ID] = self.agent_id
        span = _step_span(f"{c.OP_INVOKE_AGENT} {self.name}", attributes)
        ctx = otel_context.set_value(STEP_KEY, self, trace.set_span_in_context(span))
        return span, ctx

    def __enter__(self) -> Self:
        super().__enter__()
        if self._initial_input is not None:
            self.input(self._initial_input)
        if self._initial_content is not None:
            self.say(self._initial_content)
        return self

    @property
    def said(self) -> tuple[str, ...]:
        """Everything the agent said in this step so far."""
        with self._lock:
            return tuple(text for _, text in self._said)

    def say(self, text: object) -> None:
        """Record output of the agent (appended to `gen_ai.output.messages`)."""
        span = self._live_span()
        with self._lock:
            self._said.append((clock.now(), as_text(text)))
            messages = text_messages("assistant", [said for _, said in self._said])
        span.set_attribute(c.GEN_AI_OUTPUT_MESSAGES, messages)

    def input(self, text: object, *, role: str = "user") -> None:
        """Record input the agent received (appended to `gen_ai.input.messages`)."""
        span = self._live_span()
        with self._lock:
            self._inputs.append((role, as_text(text)))
            messages = role_messages(self._inputs)
        span.set_attribute(c.GEN_AI_INPUT_MESSAGES, messages)

    def _finish(self, span: Span, exc: BaseException | None) -> None:
        if not self._has_child_steps:
            super()._finish(span, exc)
            mark_as_step_error(exc)
            return
        parent = trace.set_span_in_context(span)
        with self._lock:
            said = list(self._said)
        for at, text in said:
            self._child_step(parent, at, text_messages("assistant", [text]))
        if exc is not None and not is_step_error(exc):
            # The turn is a container, invisible in the trajectory: its crash needs a
            # step of its own, unless a nested step already shows this exception.
            at = clock.now()
            error_step = self._child_step(
                parent, at, text_messages("assistant", [describe(exc)]), end=False
            )
            record_error(error_step, exc)
            error_step.end(end_time=at)
            mark_as_step_error(exc)
        super()._finish(span, exc)

    def _child_step(self, parent: Context, at: int, output: str, *, end: bool = True) -> Span:
        child = tracer().start_span(
            f"message {self.name}",
            context=parent,
            attributes={
                c.STEP_KIND: c.STEP_KIND_MESSAGE,
                c.GEN_AI_AGENT_NAME: self.name,
                c.GEN_AI_OUTPUT_MESSAGES: output,
                **run_attributes(),
            },
            start_time=at,
        )
        if end:
            child.end(end_time=at)
        return child


class ToolCall(Scope):
    """One tool execution (`execute_tool` span); `result()` records what it returned.

    An exception escaping the block marks the call failed (status ERROR, `error.type`,
    the exception recorded) and is re-raised.
    """

    def __init__(
        self,
        name: str,
        arguments: object = None,
        *,
        call_id: str | None = None,
        agent: str | None = None,
    ) -> None:
        super().__init__()
        if not name or not name.strip():
            raise ValueError("tool_call needs the tool's name")
        self.name = name
        self.arguments = arguments
        self.call_id = call_id
        self.agent = agent
        self.value: object = None
        """The result recorded with `result()`."""

    def _start(self) -> tuple[Span, Context]:
        _note_step_started()
        attributes = {
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
            c.GEN_AI_TOOL_NAME: self.name,
            **run_attributes(),
        }
        if self.arguments is not None:
            attributes[c.GEN_AI_TOOL_CALL_ARGUMENTS] = as_text(self.arguments)
        if self.call_id is not None:
            attributes[c.GEN_AI_TOOL_CALL_ID] = self.call_id
        if self.agent is not None:
            attributes[c.GEN_AI_AGENT_NAME] = self.agent
        span = _step_span(f"{c.OP_EXECUTE_TOOL} {self.name}", attributes)
        return span, trace.set_span_in_context(span)

    def result(self, value: object) -> None:
        """Record the tool's result (`gen_ai.tool.call.result`, JSON unless a string)."""
        self.value = value
        self._live_span().set_attribute(c.GEN_AI_TOOL_CALL_RESULT, as_text(value))

    def _finish(self, span: Span, exc: BaseException | None) -> None:
        super()._finish(span, exc)
        mark_as_step_error(exc)


def agent_step(
    name: str,
    content: str | None = None,
    *,
    input: str | None = None,
    agent_id: str | None = None,
) -> AgentStep:
    """`with agent_step("Planner") as s:` — record one turn of agent `name`."""
    return AgentStep(name, content, input=input, agent_id=agent_id)


def tool_call(
    name: str,
    arguments: object = None,
    *,
    call_id: str | None = None,
    agent: str | None = None,
) -> ToolCall:
    """`with tool_call("search", {"q": …}) as call:` — record one tool execution.

    The agent is the enclosing agent step's, unless `agent` names one.
    """
    return ToolCall(name, arguments, call_id=call_id, agent=agent)


def _instant_step(name: str, attributes: dict[str, str]) -> None:
    """A step that happens at one instant (a message, a handoff): a zero-length span."""
    _note_step_started()
    at = clock.now()
    span = _step_span(name, {**attributes, **run_attributes()}, at)
    span.end(end_time=at)


def handoff(source: str, target: str, message: str) -> None:
    """Record agent `source` passing control to agent `target` with `message`."""
    _instant_step(
        f"handoff {source} -> {target}",
        {
            c.STEP_KIND: c.STEP_KIND_HANDOFF,
            c.GEN_AI_AGENT_NAME: source,
            c.HANDOFF_TARGET: target,
            c.GEN_AI_OUTPUT_MESSAGES: text_messages("assistant", [message]),
        },
    )


_ROLE_KINDS = {
    "user": c.STEP_KIND_HUMAN,
    "human": c.STEP_KIND_HUMAN,
    "system": c.STEP_KIND_SYSTEM,
    "tool": c.STEP_KIND_TOOL,
}


def message(agent: str, text: str, *, role: str = "assistant") -> None:
    """Record a plain message by `agent` as one step (role `user` makes it a human step)."""
    _instant_step(
        f"message {agent}",
        {
            c.STEP_KIND: _ROLE_KINDS.get(role.strip().lower(), c.STEP_KIND_MESSAGE),
            c.GEN_AI_AGENT_NAME: agent,
            c.GEN_AI_OUTPUT_MESSAGES: text_messages(role, [text]),
        },
    )


def current_step() -> AgentStep | None:
    """The agent step whose block the caller is in, if any."""
    value = otel_context.get_value(STEP_KEY)
    return value if isinstance(value, AgentStep) else None


def _note_step_started() -> None:
    """Tell the enclosing agent step that a step is nested in it (see `AgentStep`)."""
    parent = current_step()
    if parent is not None:
        parent._has_child_steps = True


def _step_span(name: str, attributes: dict[str, str], at: int | None = None) -> Span:
    """The span of a step, started now (or at `at`, in `clock` nanoseconds)."""
    return tracer().start_span(
        name,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        start_time=clock.now() if at is None else at,
    )
