"""Convention mapping: faultfinder / GenAI semconv / OpenInference attributes → one vocabulary.

Pure functions over `SpanRecord`; no I/O. Each fact is looked up in priority order
(faultfinder's own attributes, then OTel GenAI semconv, then OpenInference, then the few
pydantic-ai names the standards have no counterpart for) and odd attribute types or
malformed JSON never raise: they fall back to the raw text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from faultfinder import conventions as c
from faultfinder.attributors.model import StepKind, StepStatus
from faultfinder.server.otlp.model import AttributeValue, SpanRecord, StatusCode

__all__ = [
    "MappedSpan",
    "RunFacts",
    "as_text",
    "map_span",
    "requests_tools",
    "run_facts",
    "run_id_of",
]


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What one span says about the run it belongs to."""

    run_id: str
    """The run: `faultfinder.run.id`, else (when grouping by conversation) the
    conversation/session id, else the trace id."""
    is_root: bool
    """The span has no parent: the run's root (or a provisional root for an orphan)."""
    failed: bool
    """The span is a root with status ERROR, or says outcome=failure."""
    outcome: str | None
    """`success` / `failure` when the span carries an explicit outcome."""
    task: str | None
    ground_truth: str | None
    final_answer: str | None
    opens_run: bool = True
    """False for a root span that only records setting an agent up (GenAI `create_agent`,
    which autogen-core sends in a trace of its own as each agent is built): stored, but no
    run of its own."""


def as_text(value: object) -> str | None:
    """An attribute value as text: strings as they are, anything else as JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def run_id_of(span: SpanRecord, *, group_by_conversation: bool = False) -> str:
    """The run one span belongs to (`RunFacts.run_id`), without the other facts: the
    event bus needs only this for every stored span."""
    attrs = span.attributes
    run_id = as_text(attrs.get(c.RUN_ID))
    if run_id is None and group_by_conversation:
        run_id = as_text(attrs.get(c.GEN_AI_CONVERSATION_ID) or attrs.get(c.OI_SESSION_ID))
    return span.trace_id if run_id is None else run_id


def run_facts(span: SpanRecord, *, group_by_conversation: bool = False) -> RunFacts:
    """Run-level facts of one span (root status, outcome, task, answers)."""
    attrs = span.attributes
    run_id = run_id_of(span, group_by_conversation=group_by_conversation)
    is_root = span.parent_span_id is None
    outcome = as_text(attrs.get(c.RUN_OUTCOME))
    outcome = outcome.strip().lower() if outcome else None
    failed = outcome == "failure" or (is_root and span.status_code == StatusCode.ERROR)
    setup = is_root and _lower(attrs.get(c.GEN_AI_OPERATION_NAME)) == c.OP_CREATE_AGENT
    return RunFacts(
        run_id=run_id,
        is_root=is_root,
        failed=failed,
        outcome=outcome,
        task=as_text(attrs.get(c.RUN_TASK)),
        ground_truth=as_text(attrs.get(c.RUN_GROUND_TRUTH)),
        final_answer=as_text(attrs.get(c.RUN_FINAL_ANSWER)),
        opens_run=not setup,
    )


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
    attrs = span.attributes
    operation = _lower(attrs.get(c.GEN_AI_OPERATION_NAME))
    oi_kind = _upper(attrs.get(c.OPENINFERENCE_SPAN_KIND))

    convention_kind = _OPERATION_KINDS.get(operation) or _OPENINFERENCE_KINDS.get(oi_kind)
    explicit_kind = _STEP_KINDS.get(_lower(attrs.get(c.STEP_KIND)))
    kind = explicit_kind or convention_kind or StepKind.MESSAGE
    is_tool = kind is StepKind.TOOL

    named_agent = _first_name(attrs, (c.GEN_AI_AGENT_NAME, c.OI_AGENT_NAME, c.OI_GRAPH_NODE_ID))
    # A framework's own run context names the agent too, but makes no span a step.
    agent = named_agent or _framework_agent(attrs)
    tool_result = _first_text(attrs, (c.GEN_AI_TOOL_CALL_RESULT,))
    tool_arguments = _first_text(attrs, (c.GEN_AI_TOOL_CALL_ARGUMENTS,))
    if is_tool:
        # OpenInference's `tool.parameters` is the tool's JSON schema, not the call's
        # arguments (those are its `input.value`): it is only the last resort.
        tool_result = _first_present(
            tool_result,
            _output_value(attrs),
            _first_text(attrs, (c.PYDANTIC_AI_TOOL_RESPONSE,)),
        )
        tool_arguments = _first_present(
            tool_arguments,
            _first_text(attrs, (c.OI_INPUT_VALUE, c.PYDANTIC_AI_TOOL_ARGUMENTS)),
        )
    tool_arguments = _first_present(tool_arguments, as_text(attrs.get(c.OI_TOOL_PARAMETERS)))
    is_agent_span = operation == c.OP_INVOKE_AGENT or oi_kind == c.OI_KIND_AGENT

    # One look for flattened OpenInference messages instead of a scan per question.
    flattened = any(key.startswith(_OI_FLATTENED_PREFIXES) for key in attrs)
    content = _first_present(
        as_text(attrs.get(c.STEP_CONTENT)),
        _messages_text(attrs.get(c.GEN_AI_OUTPUT_MESSAGES)),
        _openinference_messages_text(attrs, c.OI_LLM_OUTPUT_MESSAGES, flattened=flattened),
        None if is_tool else _answer_field(attrs),
        _output_value(attrs),
        tool_result,
        # pydantic-ai puts an agent run's output here rather than in output messages.
        as_text(attrs.get(c.PYDANTIC_AI_FINAL_RESULT)) if is_agent_span else None,
    )
    if kind is StepKind.LLM and content is not None:
        content = _dspy_fields_text(content) or content
    # The input messages answer two questions (all text, the user's text): decoded once.
    raw_input = attrs.get(c.GEN_AI_INPUT_MESSAGES)
    input_messages = _decode_messages(raw_input)
    input_text = _first_present(
        _messages_text(raw_input, decoded=input_messages),
        _openinference_messages_text(attrs, c.OI_LLM_INPUT_MESSAGES, flattened=flattened),
        as_text(attrs.get(c.OI_INPUT_VALUE)),
        tool_arguments,
    )
    user_input = _first_present(
        _messages_text(raw_input, role="user", decoded=input_messages),
        _openinference_messages_text(
            attrs, c.OI_LLM_INPUT_MESSAGES, role="user", flattened=flattened
        ),
    )
    step_index = _index(attrs.get(c.STEP_INDEX))
    explicit = step_index is not None or any(
        attrs.get(key) is not None for key in (c.STEP_KIND, c.STEP_ROLE, c.STEP_CONTENT)
    )
    status, error = _status(span)
    return MappedSpan(
        agent=agent,
        is_agent_span=is_agent_span,
        kind=kind,
        content=content,
        input=input_text,
        user_input=user_input,
        role=as_text(attrs.get(c.STEP_ROLE)),
        tool_name=_first_name(attrs, (c.GEN_AI_TOOL_NAME, c.OI_TOOL_NAME))
        or (_tool_named_by_span(span.name) if is_tool else None),
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
            or (convention_kind is not None and not _prepares_model_call(attrs, oi_kind, flattened))
            or (named_agent is not None and content is not None)
        ),
    )


# --- frameworks' own run context and output shapes --------------------------------------

_LANGGRAPH_CHECKPOINT_NS = "langgraph_checkpoint_ns"
_LANGGRAPH_NODE = "langgraph_node"
_WORKFLOW_AGENT = re.compile(r"""\bcurrent_agent_name=(?P<q>['"])(?P<agent>.+?)(?P=q)""")
"""LlamaIndex AgentWorkflow's events (`AgentSetup`, `AgentOutput`) name the agent whose
turn it is; a workflow step's `input.value` holds the event it was given."""


def _framework_agent(attrs: Mapping[str, AttributeValue]) -> str | None:
    """The agent a framework's own run context names, when no convention does.

    LangGraph (in the `metadata` LangChain's instrumentation records): the node of the
    top-level graph the span runs in, the first segment of `langgraph_checkpoint_ns`
    (`researcher:<id>|agent:<id>` → `researcher`, so the nodes of an agent built as a
    subgraph, such as `create_react_agent`'s `agent` and `tools`, are its own), else
    `langgraph_node`. LlamaIndex AgentWorkflow: the `current_agent_name` of the workflow
    event in `input.value`."""
    metadata = _json_object(attrs.get(c.OI_METADATA))
    if metadata is not None:
        namespace = metadata.get(_LANGGRAPH_CHECKPOINT_NS)
        if isinstance(namespace, str):
            node = namespace.split("|", 1)[0].split(":", 1)[0].strip()
            if node:
                return node
        graph_node = metadata.get(_LANGGRAPH_NODE)
        if isinstance(graph_node, str) and graph_node.strip():
            return graph_node.strip()
    given = attrs.get(c.OI_INPUT_VALUE)
    if isinstance(given, str) and "current_agent_name=" in given:
        matches = _WORKFLOW_AGENT.findall(given)
        if matches:
            # The field follows the event's messages: the last mention is the field.
            return str(matches[-1][1]).strip() or None
    return None


def _json_object(value: AttributeValue) -> dict[str, Any] | None:
    """`value` decoded as a JSON object; None when it is not one."""
    if not isinstance(value, str | bytes) or value.lstrip()[:1] not in ("{", b"{"):
        return None
    try:
        decoded = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return decoded if isinstance(decoded, dict) else None


def _output_value(attrs: Mapping[str, AttributeValue]) -> str | None:
    """`output.value`, unwrapped to its text when it is a framework's serialised message
    or result (see `_unwrapped_text`), else as it is."""
    text = as_text(attrs.get(c.OI_OUTPUT_VALUE))
    if text is None:
        return None
    decoded = _json_object(text)
    unwrapped = _unwrapped_text(decoded, depth=0) if decoded is not None else None
    if unwrapped is None:
        unwrapped = _json_string(attrs, text)
    return text if unwrapped is None else unwrapped


def _json_string(attrs: Mapping[str, AttributeValue], text: str) -> str | None:
    """An `output.value` declared JSON (`output.mime_type`) that is a JSON string: the
    string (DSPy serialises a tool's text result so, quotes and escapes included)."""
    if _lower(attrs.get(c.OI_OUTPUT_MIME_TYPE)) != "application/json":
        return None
    if not text.lstrip().startswith('"'):
        return None
    try:
        decoded = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return decoded if isinstance(decoded, str) else None


_ANSWER_FIELDS = ("raw", "answer", "final_answer", "final_output")
"""Where a framework's serialised run result keeps its answer text: CrewAI's
`CrewOutput` / `TaskOutput` (`raw`, beside the tasks' outputs and the messages), a DSPy
`Prediction` (its `answer` output field, beside the ReAct trajectory and reasoning)."""


def _answer_field(attrs: Mapping[str, AttributeValue]) -> str | None:
    """The answer text of a non-tool span's `output.value` that is a serialised run result
    (a JSON object with a text field of `_ANSWER_FIELDS`); None otherwise. Not for tools:
    a tool's whole result is its output."""
    decoded = _json_object(attrs.get(c.OI_OUTPUT_VALUE))
    if decoded is None:
        return None
    for field in _ANSWER_FIELDS:
        value = decoded.get(field)
        if isinstance(value, str) and value.strip():
            return value
    return None


_METHOD_SUFFIX = re.compile(r"^(?P<name>.+?)\.(?:__call__|a?call|a?forward|_?a?run|a?invoke)$")


def _tool_named_by_span(span_name: str) -> str | None:
    """A tool span that names no tool (`tool.name`): the tool its span is named after,
    less the method called (DSPy's `census_lookup.__call__`)."""
    match = _METHOD_SUFFIX.match(span_name.strip())
    if match is None:
        return None
    return match.group("name").strip() or None


_DSPY_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]")
_DSPY_COMPLETED = "completed"
"""The ChatAdapter's end marker, `[[ ## completed ## ]]`: no field."""


def _dspy_fields_text(text: str) -> str | None:
    """A model reply in DSPy's field format read as a person would: a ReAct turn (its
    documented output fields `next_thought`, `next_tool_name`, `next_tool_args`, as the
    ChatAdapter's `[[ ## field ## ]]` sections or the JSON adapter's object) as its thought
    and `tool(args)`, other ChatAdapter sections as `field: value` lines. None for any
    other text."""
    fields: dict[str, object] = {}
    if text.lstrip().startswith("[[ ## "):
        pieces = _DSPY_FIELD.split(text)
        # [text before, name, value, name, value, ...]
        fields = {
            pieces[n]: pieces[n + 1].strip()
            for n in range(1, len(pieces) - 1, 2)
            if pieces[n] != _DSPY_COMPLETED
        }
    elif '"next_tool_name"' in text:
        fields = _json_object(text) or {}
    if not fields:
        return None
    name = fields.get("next_tool_name")
    if not isinstance(name, str) or not name.strip():
        lines = [f"{field}: {value}" for field, value in fields.items() if value != ""]
        return "\n".join(lines) if lines and "[[ ## " in text else None
    arguments = fields.get("next_tool_args")
    arguments_text = arguments if isinstance(arguments, str) else as_text(arguments)
    thought = as_text(fields.get("next_thought"))
    call = _tool_call_text(name.strip(), arguments_text or "{}")
    return f"{thought.strip()}\n{call}" if thought and thought.strip() else call


def _unwrapped_text(value: dict[str, Any], *, depth: int) -> str | None:
    """The text inside a serialised message or result object, None when `value` is none:
    a LangChain message (`{"type": "tool", "data": {"content": …}}`, or the
    `{"lc": 1, "type": "constructor", "kwargs": {"content": …}}` form), a LlamaIndex
    `ToolOutput` (`{"blocks": [{"text": …}], "tool_name": …}`), or a graph state holding
    `messages` (its last message: LangGraph's `MessagesState`)."""
    if depth > 3:
        return None
    genai = _google_genai_text(value)
    if genai is not None:
        return genai
    data = value.get("data")
    if isinstance(value.get("type"), str) and isinstance(data, dict) and "content" in data:
        return _content_text(data["content"])
    kwargs = value.get("kwargs")
    if value.get("lc") is not None and isinstance(kwargs, dict) and "content" in kwargs:
        return _content_text(kwargs["content"])
    blocks = value.get("blocks")
    if "tool_name" in value and isinstance(blocks, list):
        texts = [text for block in blocks if (text := _part_text(block)) is not None]
        return "\n".join(texts) if texts else _content_text(value.get("raw_output"))
    messages = value.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        last = messages[-1]
        return _unwrapped_text(last, depth=depth + 1) or (
            _message_text(last) if "role" in last else None
        )
    return None


def _google_genai_text(value: dict[str, Any]) -> str | None:
    """The text of a serialised Google GenAI object, None when `value` is none: a
    `FunctionResponse` (`{"id", "name", "response": {...}}`, a tool's result as Google ADK
    reports it; a result that is not an object is wrapped as `{"result": …}`), or a model
    response or event holding `content: {"parts": [{"text": …}], "role": …}`."""
    response = value.get("response")
    if isinstance(value.get("name"), str) and isinstance(response, dict):
        if set(response) == {"result"}:
            result = response["result"]
            return result if isinstance(result, str) else json.dumps(result, default=str)
        return as_text(response)
    content = value.get("content")
    if isinstance(content, dict) and isinstance(content.get("parts"), list):
        texts = [text for part in content["parts"] if (text := _part_text(part)) is not None]
        return "\n".join(texts) if texts else None
    return None


def _content_text(content: object) -> str | None:
    if isinstance(content, list):
        texts = [text for part in content if (text := _part_text(part)) is not None]
        return "\n".join(texts) if texts else None
    return as_text(content)


def _prepares_model_call(
    attrs: Mapping[str, AttributeValue], oi_kind: str, flattened: bool
) -> bool:
    """An OpenInference LLM span that sends no messages, gets none back and counts no
    tokens, its output a chat request (a JSON object of `messages`): a helper preparing
    the model call (LlamaIndex's `_prepare_chat_with_tools`), not a call."""
    if oi_kind != c.OI_KIND_LLM or flattened:
        return False
    if any(
        attrs.get(key) is not None
        for key in (
            c.OI_LLM_INPUT_MESSAGES,
            c.OI_LLM_OUTPUT_MESSAGES,
            c.OI_LLM_TOKEN_COUNT_PROMPT,
            c.OI_LLM_TOKEN_COUNT_COMPLETION,
            c.GEN_AI_INPUT_MESSAGES,
            c.GEN_AI_OUTPUT_MESSAGES,
        )
    ):
        return False
    output = _json_object(attrs.get(c.OI_OUTPUT_VALUE))
    return output is not None and isinstance(output.get("messages"), list)


def _lower(value: AttributeValue) -> str:
    return value.strip().lower() if isinstance(value, str) else ""


def _upper(value: AttributeValue) -> str:
    return value.strip().upper() if isinstance(value, str) else ""


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


# --- GenAI messages (`[{role, parts: [{type, content}]}]` as JSON) ---------------------


def _decode_messages(value: AttributeValue) -> list[Any] | None:
    """GenAI-semconv messages as a list (one message becomes a list of one); None when
    `value` is absent or not messages."""
    if value is None:
        return None
    messages: Any = value
    if isinstance(value, str | bytes):
        try:
            messages = orjson.loads(value)
        except orjson.JSONDecodeError:
            # orjson refuses some JSON the standard library reads (integers beyond 64
            # bits, NaN, lone surrogates): ask it before giving up.
            try:
                messages = json.loads(value)
            except (ValueError, RecursionError):
                return None
    if isinstance(messages, dict):
        messages = [messages]
    return messages if isinstance(messages, list) else None


_UNDECODED: Any = object()


def _messages_text(
    value: AttributeValue, *, role: str | None = None, decoded: list[Any] | None = _UNDECODED
) -> str | None:
    """Text of GenAI-semconv messages; with `role`, of the first message in that role.

    A value that is not JSON is returned as it is (unless a role is asked for).
    `decoded` is `_decode_messages(value)` when the caller already has it.
    """
    if value is None:
        return None
    messages = _decode_messages(value) if decoded is _UNDECODED else decoded
    if messages is None:
        return None if role else as_text(value)
    texts: list[str] = []
    for message in messages:
        if role is not None:
            if isinstance(message, dict) and _lower(message.get("role")) == role:
                return _message_text(message)
            continue
        text = _message_text(message)
        if text is not None:
            texts.append(text)
    return "\n".join(texts) if texts else None


def _message_text(message: object) -> str | None:
    if isinstance(message, str):
        return message
    if not isinstance(message, dict):
        return None
    pieces: list[str] = []
    parts = message.get("parts")
    if isinstance(parts, list):
        pieces.extend(text for part in parts if (text := _part_text(part)) is not None)
    else:
        # Older and OpenAI-style messages carry `content` directly.
        content = message.get("content", message.get(c.OI_MESSAGE_CONTENT))
        if isinstance(content, list):
            pieces.extend(text for part in content if (text := _part_text(part)) is not None)
        elif content is not None:
            pieces.append(as_text(content) or "")
        pieces.extend(_openai_tool_calls_text(message.get("tool_calls")))
    return "\n".join(pieces) if pieces else None


def _openai_tool_calls_text(calls: object) -> list[str]:
    """OpenAI-shaped `tool_calls` beside a message's `content` (`[{id, type: function,
    function: {name, arguments}}]`, as AG2 records them), each as `tool(args)`."""
    if not isinstance(calls, list):
        return []
    texts: list[str] = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        named = function if isinstance(function, dict) else call
        if named.get("name") is not None:
            texts.append(_tool_call_text(named.get("name"), named.get("arguments")))
    return texts


def _part_text(part: object) -> str | None:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return None
    part_type = _lower(part.get("type")) or "text"
    if part_type == "text":
        text = part.get("content", part.get("text"))
        return as_text(text) if text is not None else None
    if part_type == "tool_call":
        return _tool_call_text(part.get("name"), part.get("arguments"))
    if part_type == "tool_call_response":
        return as_text(part.get("response"))
    if part_type in ("function", "function_call"):
        # An OpenAI-shaped call among the parts (a chat `tool_calls` entry, a
        # Responses `function_call` item).
        return next(iter(_openai_tool_calls_text([part])), None)
    return None


def _tool_call_text(name: object, arguments: object) -> str:
    return f"{as_text(name) or 'tool'}({as_text(arguments) or ''})"


# --- OpenInference flattened messages (`llm.output_messages.N.message.content`) ------------

_OI_MESSAGE_KEY = re.compile(r"^(\d+)\.(.+)$")
_OI_CONTENT_PART = re.compile(
    rf"^{re.escape(c.OI_MESSAGE_CONTENTS)}\.(\d+)\.{re.escape(c.OI_MESSAGE_CONTENT_TEXT)}$"
)
_OI_TOOL_CALL = re.compile(
    rf"^{re.escape(c.OI_MESSAGE_TOOL_CALLS)}\.(\d+)\."
    rf"({re.escape(c.OI_TOOL_CALL_FUNCTION_NAME)}|{re.escape(c.OI_TOOL_CALL_FUNCTION_ARGUMENTS)})$"
)


_OI_FLATTENED_PREFIXES = (c.OI_LLM_INPUT_MESSAGES + ".", c.OI_LLM_OUTPUT_MESSAGES + ".")


def _openinference_messages_text(
    attrs: Mapping[str, AttributeValue],
    prefix: str,
    *,
    role: str | None = None,
    flattened: bool = True,
) -> str | None:
    """Text of `prefix.N.message.*` attributes; with `role`, of the first message in it.

    `flattened=False` says no attribute starts with either message prefix (no scan)."""
    unflattened = attrs.get(prefix)
    if unflattened is not None:
        return _messages_text(unflattened, role=role)
    if not flattened:
        return None
    messages: dict[int, dict[str, AttributeValue]] = {}
    start = prefix + "."
    for key, value in attrs.items():
        if key.startswith(start) and (match := _OI_MESSAGE_KEY.match(key[len(start) :])):
            messages.setdefault(int(match.group(1)), {})[match.group(2)] = value
    texts: list[str] = []
    for n in sorted(messages):
        fields = messages[n]
        if role is not None and _lower(fields.get(c.OI_MESSAGE_ROLE)) != role:
            continue
        text = _openinference_message_text(fields)
        if role is not None:
            return text
        if text is not None:
            texts.append(text)
    return "\n".join(texts) if texts else None


def _openinference_message_text(fields: Mapping[str, AttributeValue]) -> str | None:
    pieces: list[str] = []
    content = as_text(fields.get(c.OI_MESSAGE_CONTENT))
    if content is not None:
        pieces.append(content)
    else:
        parts: dict[int, str] = {}
        for key, value in fields.items():
            if (match := _OI_CONTENT_PART.match(key)) and (text := as_text(value)) is not None:
                parts[int(match.group(1))] = text
        pieces.extend(parts[m] for m in sorted(parts))
    calls: dict[int, dict[str, AttributeValue]] = {}
    for key, value in fields.items():
        if match := _OI_TOOL_CALL.match(key):
            calls.setdefault(int(match.group(1)), {})[match.group(2)] = value
    for m in sorted(calls):
        call = calls[m]
        pieces.append(
            _tool_call_text(
                call.get(c.OI_TOOL_CALL_FUNCTION_NAME), call.get(c.OI_TOOL_CALL_FUNCTION_ARGUMENTS)
            )
        )
    return "\n".join(pieces) if pieces else None


# --- whether a model reply asks for tools ---------------------------------------------------

_OI_OUTPUT_TOOL_CALL = re.compile(
    rf"^{re.escape(c.OI_LLM_OUTPUT_MESSAGES)}\.\d+\.{re.escape(c.OI_MESSAGE_TOOL_CALLS)}\."
)


def requests_tools(span: SpanRecord) -> bool:
    """The span's output messages call a tool (GenAI `tool_call` parts, OpenAI-shaped
    `tool_calls`, OpenInference `llm.output_messages.N.message.tool_calls.*`): a model
    reply that hands the turn on rather than answering."""
    attrs = span.attributes
    if any(_OI_OUTPUT_TOOL_CALL.match(key) for key in attrs):
        return True
    for key in (c.GEN_AI_OUTPUT_MESSAGES, c.OI_LLM_OUTPUT_MESSAGES):
        for message in _decode_messages(attrs.get(key)) or ():
            if not isinstance(message, dict):
                continue
            if message.get("tool_calls"):
                return True
            parts = message.get("parts")
            if isinstance(parts, list) and any(
                isinstance(part, dict) and _lower(part.get("type")) == "tool_call" for part in parts
            ):
                return True
    return False
