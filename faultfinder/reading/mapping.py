"""Convention mapping: faultfinder / GenAI semconv / OpenInference attributes → one vocabulary.

Pure functions over `SpanRecord`; no I/O. Each fact is looked up in priority order
(faultfinder's own attributes, then OTel GenAI semconv, then OpenInference, then the few
pydantic-ai names the standards have no counterpart for, then a framework's own shapes
in `shapes.py`) and odd attribute types or malformed JSON never raise: they fall back to
the raw text. The text of messages is read by `messages.py`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from faultfinder import conventions as c
from faultfinder.attributors.model import StepKind, StepStatus
from faultfinder.reading.events import event_attributes
from faultfinder.reading.messages import (
    OI_FLATTENED_PREFIXES,
    ToolReport,
    as_text,
    decode_messages,
    last_reply_text,
    later_user_turns,
    lower,
    messages_text,
    openinference_messages,
    openinference_messages_text,
    tool_reports,
    upper,
)
from faultfinder.reading.model import AttributeValue, SpanRecord, StatusCode
from faultfinder.reading.shapes import (
    answer_field,
    dspy_fields_text,
    framework_agent,
    graph_node_author,
    output_value,
    prepares_model_call,
    tool_call_arguments,
    tool_call_result,
    tool_named_by_span,
    unnamed_agent_node,
    workflow_tool_call,
    workflow_turn,
)

__all__ = [
    "MappedSpan",
    "as_text",
    "is_log_events_carrier",
    "map_span",
    "requests_tools",
]


def is_log_events_carrier(span: SpanRecord) -> bool:
    """The span the sidecar made of the GenAI log records naming one span
    (`faultfinder/server/otlp/log_events.py`): no step, no run, its events are its parent's."""
    return span.name == c.LOG_EVENTS_SPAN and span.attributes.get(c.LOG_EVENTS_SPAN) is True


# --- step facts -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MappedSpan:
    """What one span says about itself as a (possible) step, in the `Step` vocabulary."""

    agent: str | None
    """The span's own agent (`gen_ai.agent.name` → `agent.name` → `graph.node.id`);
    None when the span names none (the assembler then looks at its ancestors)."""
    is_agent_span: bool
    """An agent invocation (`invoke_agent`, OpenInference AGENT): its agent is inherited
    by the spans beneath it."""
    kind: StepKind
    content: str | None
    """The step's own output text."""
    input: str | None
    """The text the span received (all input messages, or `input.value`)."""
    user_input: str | None
    """The first user message among the inputs, when messages carry roles."""
    role: str | None
    """The source's own role label (`faultfinder.step.role`)."""
    tool_name: str | None
    tool_arguments: str | None
    tool_result: str | None
    step_index: int | None
    """Explicit 0-based position (`faultfinder.step.index`)."""
    status: StepStatus
    error: str | None
    model: str | None
    input_tokens: int | None
    output_tokens: int | None
    is_step_candidate: bool
    """The span speaks one of the conventions as a step (explicit step attributes, an
    LLM/tool/agent operation, or content and an agent of its own); plain spans such as
    HTTP client calls are not candidates."""
    later_user_turns: tuple[tuple[str, str], ...] = ()
    """A model call's input messages from the user that follow one of the assistant's,
    each with the assistant's text it answers (`messages.later_user_turns`): the user's
    turns in a conversation so far."""
    agent_from_context: bool = False
    """`agent` is the framework's run context (a LangGraph node, a LlamaIndex workflow
    event: `shapes.framework_agent`), not a convention's name for the agent."""
    node_author: str | None = None
    """Where `agent` is a LangGraph node: the name its output's AI messages carry
    (`shapes.graph_node_author`), which the assembler gives the node's steps."""
    tool_reports: tuple[ToolReport, ...] = ()
    """A model call's input messages that are tools' reports, each with the call it
    answers (`messages.tool_reports`): the only record of a tool call whose
    instrumentation records no tool span."""
    turn_of: str | None = None
    """The agent a workflow step's event gives the turn to (`shapes.workflow_turn`): its
    later siblings are that agent's work until another takes the turn."""
    asks_for_tools: bool = False
    """A model call that finished to call tools (`gen_ai.response.finish_reasons`): when
    its output records no call, the calls that followed it say what it asked for."""


_OPERATION_KINDS: dict[str, StepKind] = {
    c.OP_EXECUTE_TOOL: StepKind.TOOL,
    c.OP_CHAT: StepKind.LLM,
    c.OP_TEXT_COMPLETION: StepKind.LLM,
    c.OP_GENERATE_CONTENT: StepKind.LLM,
    c.OP_INVOKE_AGENT: StepKind.MESSAGE,
    c.OP_INVOKE_WORKFLOW: StepKind.MESSAGE,
}
"""GenAI operations that are steps, and the kind of step each is."""

_OPENINFERENCE_KINDS: dict[str, StepKind] = {
    c.OI_KIND_TOOL: StepKind.TOOL,
    c.OI_KIND_RETRIEVER: StepKind.TOOL,
    c.OI_KIND_RERANKER: StepKind.TOOL,
    c.OI_KIND_LLM: StepKind.LLM,
    c.OI_KIND_AGENT: StepKind.MESSAGE,
    c.OI_KIND_GUARDRAIL: StepKind.TOOL,
}
"""OpenInference span kinds that are steps. CHAIN is not: LangChain emits chains for
prompt templates and output parsers, which would bury the real steps. A GUARDRAIL is an
automated check that rejects or rewrites input or output: like a tool's, its report can
be the decisive step (a wrong block, a missed jailbreak), answered for by the agent it
ran for (`learned.answerable_agents`); as `system` it could never be blamed."""

_STEP_KINDS = {kind.value: kind for kind in StepKind}


def map_span(span: SpanRecord) -> MappedSpan:
    """Read one span's step facts through the three dialects, in priority order."""
    # Messages recorded as span events read as the attributes that carry them today.
    attrs = event_attributes(span)
    operation = lower(attrs.get(c.GEN_AI_OPERATION_NAME))
    oi_kind = upper(attrs.get(c.OPENINFERENCE_SPAN_KIND))

    named_agent = _first_name(attrs, (c.GEN_AI_AGENT_NAME, c.OI_AGENT_NAME, c.OI_GRAPH_NODE_ID))
    convention_kind = _OPERATION_KINDS.get(operation) or _OPENINFERENCE_KINDS.get(oi_kind)
    if oi_kind == c.OI_KIND_AGENT and not named_agent and as_text(attrs.get(c.OI_TOOL_NAME)):
        # A tool's call marked as an agent: openinference-instrumentation-langchain marks
        # a tool named `transfer_to_…` so (a handoff tool), and run by LangGraph's ToolNode
        # its only other name is that node's (`tools`), which is no agent. As a tool's call
        # it answers to the agent that called it.
        convention_kind = StepKind.TOOL
    workflow_tool = workflow_tool_call(attrs) if convention_kind is None else None
    if workflow_tool is not None:
        # A LlamaIndex workflow's `call_tool` step under OpenLLMetry: the only record of
        # the call.
        convention_kind = StepKind.TOOL
    explicit_kind = _STEP_KINDS.get(lower(attrs.get(c.STEP_KIND)))
    kind = explicit_kind or convention_kind or StepKind.MESSAGE
    is_tool = kind is StepKind.TOOL

    # A framework's own run context names the agent too, but makes no span a step.
    context_agent = None if named_agent else framework_agent(attrs)
    agent = named_agent or context_agent
    tool_result = tool_call_result(as_text(attrs.get(c.GEN_AI_TOOL_CALL_RESULT)))
    tool_arguments = tool_call_arguments(as_text(attrs.get(c.GEN_AI_TOOL_CALL_ARGUMENTS)))
    if is_tool:
        # OpenInference's `tool.parameters` is the tool's JSON schema, not the call's
        # arguments (those are its `input.value`): it is only the last resort.
        tool_result = _first_present(
            tool_result,
            workflow_tool.result if workflow_tool is not None else None,
            output_value(attrs),
            _first_text(attrs, (c.PYDANTIC_AI_TOOL_RESPONSE,)),
        )
        tool_arguments = _first_present(
            tool_arguments,
            workflow_tool.arguments if workflow_tool is not None else None,
            _first_text(attrs, (c.OI_INPUT_VALUE, c.PYDANTIC_AI_TOOL_ARGUMENTS)),
        )
    tool_arguments = _first_present(tool_arguments, as_text(attrs.get(c.OI_TOOL_PARAMETERS)))
    is_agent_span = operation == c.OP_INVOKE_AGENT or oi_kind == c.OI_KIND_AGENT

    # One look for flattened OpenInference messages instead of a scan per question.
    flattened = any(key.startswith(OI_FLATTENED_PREFIXES) for key in attrs)
    raw_output = attrs.get(c.GEN_AI_OUTPUT_MESSAGES)
    output_messages = decode_messages(raw_output) if raw_output is not None else None
    content = _first_present(
        as_text(attrs.get(c.STEP_CONTENT)),
        # An agent's output may be its whole response: its answer is the last reply.
        last_reply_text(output_messages) if is_agent_span else None,
        messages_text(raw_output, decoded=output_messages),
        openinference_messages_text(attrs, c.OI_LLM_OUTPUT_MESSAGES, flattened=flattened),
        None if is_tool else answer_field(attrs),
        output_value(attrs),
        tool_result,
        # pydantic-ai puts an agent run's output here rather than in output messages.
        as_text(attrs.get(c.PYDANTIC_AI_FINAL_RESULT)) if is_agent_span else None,
    )
    if kind is StepKind.LLM and content is not None:
        content = dspy_fields_text(content) or content
    # The input messages answer two questions (all text, the user's text): decoded once.
    raw_input = attrs.get(c.GEN_AI_INPUT_MESSAGES)
    input_messages = decode_messages(raw_input)
    input_text = _first_present(
        messages_text(raw_input, decoded=input_messages),
        openinference_messages_text(attrs, c.OI_LLM_INPUT_MESSAGES, flattened=flattened),
        as_text(attrs.get(c.OI_INPUT_VALUE)),
        tool_arguments,
    )
    user_input = _first_present(
        messages_text(raw_input, role="user", decoded=input_messages),
        openinference_messages_text(
            attrs, c.OI_LLM_INPUT_MESSAGES, role="user", flattened=flattened
        ),
    )
    later_turns: tuple[tuple[str, str], ...] = ()
    reports: tuple[ToolReport, ...] = ()
    if kind is StepKind.LLM:
        messages = input_messages or openinference_messages(
            attrs, c.OI_LLM_INPUT_MESSAGES, flattened=flattened
        )
        later_turns = later_user_turns(messages)
        reports = tool_reports(messages)
    step_index = _index(attrs.get(c.STEP_INDEX))
    explicit = step_index is not None or any(
        attrs.get(key) is not None for key in (c.STEP_KIND, c.STEP_ROLE, c.STEP_CONTENT)
    )
    status, error = _status(span)
    if workflow_tool is not None and workflow_tool.is_error and status is not StepStatus.ERROR:
        status, error = StepStatus.ERROR, error or workflow_tool.result
    return MappedSpan(
        agent=agent,
        is_agent_span=is_agent_span,
        kind=kind,
        content=content,
        input=input_text,
        user_input=user_input,
        role=as_text(attrs.get(c.STEP_ROLE)),
        tool_name=_first_name(attrs, (c.GEN_AI_TOOL_NAME, c.OI_TOOL_NAME))
        or (tool_named_by_span(span.name) if is_tool else None),
        tool_arguments=tool_arguments,
        tool_result=tool_result,
        step_index=step_index,
        status=status,
        error=error,
        model=_first_name(attrs, (c.GEN_AI_REQUEST_MODEL, c.OI_LLM_MODEL_NAME)),
        input_tokens=_first_count(
            attrs, (c.GEN_AI_USAGE_INPUT_TOKENS, c.OI_LLM_TOKEN_COUNT_PROMPT)
        ),
        output_tokens=_first_count(
            attrs, (c.GEN_AI_USAGE_OUTPUT_TOKENS, c.OI_LLM_TOKEN_COUNT_COMPLETION)
        ),
        is_step_candidate=(
            explicit
            or (convention_kind is not None and not prepares_model_call(attrs, oi_kind, flattened))
            or (named_agent is not None and content is not None)
        ),
        later_user_turns=later_turns,
        tool_reports=reports,
        turn_of=workflow_turn(attrs),
        asks_for_tools=kind is StepKind.LLM and _finished_for_tools(attrs),
        agent_from_context=context_agent is not None,
        node_author=(graph_node_author(attrs) or unnamed_agent_node(attrs))
        if context_agent is not None
        else None,
    )


_TOOL_FINISH_REASONS = frozenset({"tool_call", "tool_calls", "tool_use", "function_call"})


def _finished_for_tools(attrs: Mapping[str, AttributeValue]) -> bool:
    reasons = attrs.get(c.GEN_AI_RESPONSE_FINISH_REASONS)
    if isinstance(reasons, str):
        reasons = [reasons]
    return isinstance(reasons, list) and any(lower(r) in _TOOL_FINISH_REASONS for r in reasons)


def _first_present(*values: str | None) -> str | None:
    return next((value for value in values if value is not None), None)


def _first_text(attrs: Mapping[str, AttributeValue], keys: Iterable[str]) -> str | None:
    return _first_present(*(as_text(attrs.get(key)) for key in keys))


def _first_name(attrs: Mapping[str, AttributeValue], keys: Iterable[str]) -> str | None:
    """The first non-blank value among `keys`, stripped (names never carry edge spaces)."""
    for key in keys:
        text = as_text(attrs.get(key))
        if text is not None and text.strip():
            return text.strip()
    return None


def _first_count(attrs: Mapping[str, AttributeValue], keys: Iterable[str]) -> int | None:
    return next((count for key in keys if (count := _index(attrs.get(key))) is not None), None)


def _index(value: AttributeValue) -> int | None:
    """A non-negative integer from an int, an integral float or a digit string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _status(span: SpanRecord) -> tuple[StepStatus, str | None]:
    error_type = _first_name(span.attributes, (c.ERROR_TYPE,))
    if span.status_code == StatusCode.ERROR or error_type is not None:
        status = StepStatus.ERROR
    elif span.status_code == StatusCode.OK:
        status = StepStatus.OK
    else:
        status = StepStatus.UNSET
    status_message = span.status_message.strip() if span.status_code == StatusCode.ERROR else ""
    return status, (status_message or _exception_text(span) or error_type)


def _exception_text(span: SpanRecord) -> str | None:
    for event in span.events:
        if event.name != c.EXCEPTION_EVENT:
            continue
        kind = _first_name(event.attributes, (c.EXCEPTION_TYPE,))
        message = _first_name(event.attributes, (c.EXCEPTION_MESSAGE,))
        text = ": ".join(part for part in (kind, message) if part)
        if text:
            return text
    return None


# --- whether a model reply asks for tools ---------------------------------------------------

_OI_OUTPUT_TOOL_CALL = re.compile(
    rf"^{re.escape(c.OI_LLM_OUTPUT_MESSAGES)}\.\d+\.{re.escape(c.OI_MESSAGE_TOOL_CALLS)}\."
)


def requests_tools(span: SpanRecord) -> bool:
    """The span's output messages call a tool (GenAI `tool_call` parts, OpenAI-shaped
    `tool_calls`, OpenInference `llm.output_messages.N.message.tool_calls.*`; or span
    events that carry them): a model reply that hands the turn on rather than answering."""
    attrs = event_attributes(span)
    if any(_OI_OUTPUT_TOOL_CALL.match(key) for key in attrs):
        return True
    for key in (c.GEN_AI_OUTPUT_MESSAGES, c.OI_LLM_OUTPUT_MESSAGES):
        for message in decode_messages(attrs.get(key)) or ():
            if not isinstance(message, dict):
                continue
            if message.get("tool_calls"):
                return True
            parts = message.get("parts")
            if isinstance(parts, list) and any(
                isinstance(part, dict) and lower(part.get("type")) == "tool_call" for part in parts
            ):
                return True
    return False
