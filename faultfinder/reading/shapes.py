"""Frameworks' own run context and output shapes, read where no convention says it: the
agent a LangGraph node or a LlamaIndex workflow event names, the text inside serialised
LangChain messages, LlamaIndex tool outputs, Google GenAI responses and DSPy replies,
answers in a result object's field, a tool named by its span. Each reads a framework's
own documented attribute or shape, never a scenario's text. Pure functions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from faultfinder import conventions as c
from faultfinder.reading.messages import (
    as_text,
    decode_messages,
    json_list,
    lower,
    message_text,
    messages_text,
    part_text,
    text_blocks,
    tool_call_text,
)
from faultfinder.reading.model import AttributeValue

__all__ = [
    "WorkflowToolCall",
    "answer_field",
    "dspy_fields_text",
    "framework_agent",
    "graph_node_author",
    "json_object",
    "managed_agent_named",
    "output_value",
    "prepares_model_call",
    "tool_call_arguments",
    "tool_call_result",
    "tool_named_by_span",
    "unnamed_agent_node",
    "without_method",
    "workflow_tool_call",
    "workflow_turn",
]


_LANGCHAIN_AGENT_NAME = "lc_agent_name"
_LANGCHAIN_INTEGRATION = "ls_integration"
_CREATE_AGENT = "langchain_create_agent"
_UNNAMED_AGENT = "agent"
"""What an unnamed `create_agent` is called (`unnamed_agent_node`)."""
_LANGGRAPH_CHECKPOINT_NS = "langgraph_checkpoint_ns"
_LANGGRAPH_NODE = "langgraph_node"
_WORKFLOW_AGENT = re.compile(r"""\bcurrent_agent_name=(?P<q>['"])(?P<agent>.+?)(?P=q)""")
"""LlamaIndex AgentWorkflow's events (`AgentSetup`, `AgentOutput`) name the agent whose
turn it is; a workflow step's `input.value` holds the event it was given."""


def framework_agent(attrs: Mapping[str, AttributeValue]) -> str | None:
    """The agent a framework's own run context names, when no convention does.

    LangChain / LangGraph (in the `metadata` LangChain's instrumentation records): the
    `lc_agent_name` that LangChain's `create_agent(name=…)` puts in the run config of
    everything its graph runs, so its `model` and `tools` nodes, and a named agent called
    from another's tool, are that agent's; else the node of the top-level graph the span
    runs in, the first segment of `langgraph_checkpoint_ns` (`researcher:<id>|agent:<id>`
    → `researcher`, so the nodes of an agent built as a subgraph, such as
    `create_react_agent`'s `agent` and `tools`, are its own), else `langgraph_node`.
    LlamaIndex AgentWorkflow: the `current_agent_name` of the workflow event in
    `input.value`. Agno, traced by OpenLLMetry: a Team's `agno.team.name` on the team's
    run span, beneath which its leader's model calls lie."""
    team = attrs.get(c.AGNO_TEAM_NAME)
    if isinstance(team, str) and team.strip():
        return team.strip()
    metadata = _langchain_metadata(attrs)
    if metadata is not None:
        agent_name = metadata.get(_LANGCHAIN_AGENT_NAME)
        if isinstance(agent_name, str) and agent_name.strip():
            return agent_name.strip()
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


_MANAGED_AGENT_TASK = re.compile(r"You're a helpful agent named '(?P<agent>[^'\n]{1,200})'")
"""smolagents' task for a managed agent (its `managed_agent.task` prompt), which names the
agent it is given to: `You're a helpful agent named 'census_agent'.`"""


def managed_agent_named(text: str | None) -> str | None:
    """The agent a smolagents managed agent's task names, in the input of the model calls
    it makes (None when `text` holds no such task)."""
    found = _MANAGED_AGENT_TASK.search(text) if text else None
    if found is None:
        return None
    return found["agent"].strip() or None


def workflow_turn(attrs: Mapping[str, AttributeValue]) -> str | None:
    """The agent whose turn a LlamaIndex AgentWorkflow step's event gives it, as
    OpenLLMetry records the event (`traceloop.entity.output`, `{"input": […],
    "current_agent_name": "researcher"}`): the workflow's steps run one after another,
    and the agent named holds the turn until an event names another."""
    text = attrs.get(c.TRACELOOP_ENTITY_OUTPUT)
    if not isinstance(text, str) or '"current_agent_name"' not in text:
        return None
    event = json_object(text)
    agent = event.get("current_agent_name") if event is not None else None
    return agent.strip() if isinstance(agent, str) and agent.strip() else None


@dataclass(frozen=True, slots=True)
class WorkflowToolCall:
    """A tool call as a LlamaIndex AgentWorkflow's `call_tool` step records it under
    OpenLLMetry: `tool.name`, `tool.arguments`, and the `ToolCallResult` event as
    `traceloop.entity.output` (`{"tool_name", "tool_kwargs", "tool_output": {"raw_output",
    "is_error", …}}`); there is no tool span of any convention."""

    arguments: str | None
    result: str | None
    is_error: bool


def workflow_tool_call(attrs: Mapping[str, AttributeValue]) -> WorkflowToolCall | None:
    """The tool call a workflow step records (see `WorkflowToolCall`); None for any other
    span."""
    if attrs.get(c.OI_TOOL_NAME) is None:
        return None
    text = attrs.get(c.TRACELOOP_ENTITY_OUTPUT)
    if not isinstance(text, str) or '"tool_output"' not in text:
        return None
    event = json_object(text)
    output = event.get("tool_output") if event is not None else None
    if not isinstance(output, dict):
        return None
    result = output.get("raw_output")
    if result is None:
        result = text_blocks(output.get("blocks"))
    arguments = as_text(attrs.get(c.TRACELOOP_TOOL_ARGUMENTS))
    if arguments is None and event is not None and event.get("tool_kwargs") is not None:
        arguments = as_text(event.get("tool_kwargs"))
    return WorkflowToolCall(arguments, as_text(result), output.get("is_error") is True)


def _langchain_metadata(attrs: Mapping[str, AttributeValue]) -> Mapping[str, Any] | None:
    """The LangChain run metadata a span records: OpenInference's `metadata` JSON object,
    else OpenLLMetry's association properties (one attribute per key); None when the
    span has neither."""
    metadata = json_object(attrs.get(c.OI_METADATA))
    if metadata is not None:
        return metadata
    keys = (
        _LANGCHAIN_AGENT_NAME,
        _LANGCHAIN_INTEGRATION,
        _LANGGRAPH_CHECKPOINT_NS,
        _LANGGRAPH_NODE,
    )
    found = {
        key: value for key in keys if (value := attrs.get(c.TRACELOOP_ASSOCIATION_PREFIX + key))
    }
    return found or None


def unnamed_agent_node(attrs: Mapping[str, AttributeValue]) -> str | None:
    """`_UNNAMED_AGENT` for a node span of an unnamed LangChain `create_agent` run on its
    own, else None. Its graph's nodes are `model` and `tools`, neither of them the agent;
    only the node's own span says whose graph it is (`ls_integration`: the chat model's
    span beneath it says `langchain_chat_model`), so the assembler renames the node on
    every span (rule 5). A `create_agent` given a name (`lc_agent_name`) or run inside
    another graph (a namespace of more than one segment) is named as before."""
    metadata = _langchain_metadata(attrs)
    if metadata is None or metadata.get(_LANGCHAIN_INTEGRATION) != _CREATE_AGENT:
        return None
    namespace = metadata.get(_LANGGRAPH_CHECKPOINT_NS)
    if metadata.get(_LANGCHAIN_AGENT_NAME) or not isinstance(namespace, str):
        return None
    return _UNNAMED_AGENT if namespace.strip() and "|" not in namespace else None


def graph_node_author(attrs: Mapping[str, AttributeValue]) -> str | None:
    """The one name the AI messages of a LangGraph node's output state carry
    (`{"messages": [{"type": "ai", "data": {"name": …}}]}`, or LangChain's constructor
    form): LangGraph's `create_react_agent(name=…)` names every reply of its `agent`
    node so, and nothing else of the run says that name but the graph's own span. None
    when the output is no such state, its AI messages carry no name, or more than one
    (a subgraph's whole conversation, several agents' turns)."""
    text = as_text(attrs.get(c.OI_OUTPUT_VALUE) or attrs.get(c.TRACELOOP_ENTITY_OUTPUT))
    if text is None or '"messages"' not in text or '"name"' not in text:
        return None
    state = json_object(text)
    if state is not None and isinstance(state.get("outputs"), dict):
        state = state["outputs"]  # OpenLLMetry's wrapper: `{"outputs": state, "kwargs": …}`
    messages = state.get("messages") if state is not None else None
    if not isinstance(messages, list):
        return None
    names: set[str] = set()
    for message in messages:
        fields = _ai_message_fields(message)
        name = fields.get("name") if fields is not None else None
        if isinstance(name, str) and name.strip():
            names.add(name.strip())
    return names.pop() if len(names) == 1 else None


def _ai_message_fields(message: Any) -> dict[str, Any] | None:
    """The fields of a serialised LangChain AI message (`{"type": "ai", "data": …}` or
    `{"lc": 1, "id": [..., "AIMessage"], "kwargs": …}`); None for any other message."""
    if not isinstance(message, dict):
        return None
    data = message.get("data")
    if message.get("type") == "ai" and isinstance(data, dict):
        return data
    kwargs = message.get("kwargs")
    ids = message.get("id")
    if isinstance(kwargs, dict) and isinstance(ids, list) and ids[-1:] == ["AIMessage"]:
        return kwargs
    return None


def tool_call_result(text: str | None) -> str | None:
    """`gen_ai.tool.call.result` as the tool's own result: OpenLLMetry's LangChain
    instrumentation records the callback's arguments, `{"output": <ToolMessage>,
    "kwargs": {…}}`, of which the message's content is the result. A list of text content
    blocks (`[{"text": …}]` as Strands Agents and Amazon Bedrock write a result, `[{"type":
    "text", "text": …}]` as MCP does) is their text. Any other text as it is."""
    if text is not None and text.lstrip().startswith("[") and '"text"' in text:
        return text_blocks(json_list(text)) or text
    wrapper = json_object(text) if text is not None and '"output"' in text else None
    if wrapper is None or set(wrapper) != {"output", "kwargs"}:
        return text
    output = wrapper["output"]
    if isinstance(output, dict):
        return _unwrapped_text(output, depth=0) or as_text(output)
    return as_text(output)


def tool_call_arguments(text: str | None) -> str | None:
    """`gen_ai.tool.call.arguments` as the call's own arguments: OpenLLMetry's LangChain
    instrumentation records the callback's, `{"input_str": …, "tags": […], "metadata":
    {…}, "inputs": {…}, …}`, of which `inputs` (else `input_str`) is the call's. Any other
    text as it is."""
    if text is None or '"input_str"' not in text:
        return text
    wrapper = json_object(text)
    if wrapper is None or not {"input_str", "tags", "metadata"} <= set(wrapper):
        return text
    inputs = wrapper.get("inputs")
    if isinstance(inputs, dict) and inputs:
        return as_text(inputs)
    return as_text(wrapper["input_str"])


def json_object(value: AttributeValue) -> dict[str, Any] | None:
    """`value` decoded as a JSON object; None when it is not one."""
    if not isinstance(value, str | bytes) or value.lstrip()[:1] not in ("{", b"{"):
        return None
    try:
        decoded = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return decoded if isinstance(decoded, dict) else None


def output_value(attrs: Mapping[str, AttributeValue]) -> str | None:
    """`output.value`, unwrapped to its text when it is a framework's serialised message
    or result (see `_unwrapped_text`), else as it is."""
    text = as_text(attrs.get(c.OI_OUTPUT_VALUE))
    if text is None:
        return None
    decoded = json_object(text)
    unwrapped = _unwrapped_text(decoded, depth=0) if decoded is not None else None
    if unwrapped is None:
        unwrapped = _messages_text(text)
    if unwrapped is None:
        unwrapped = _json_string(attrs, text)
    return text if unwrapped is None else unwrapped


def _messages_text(text: str) -> str | None:
    """The text of an `output.value` that is a list of serialised chat messages (each an
    object with a `role`: the OpenAI Agents SDK's output of a model call), their texts and
    tool calls joined; blank when they say nothing (an empty answer is no JSON to show).
    None when the value is anything else."""
    if not text.lstrip().startswith("["):
        return None
    messages = decode_messages(text)
    if not messages or not all(isinstance(item, dict) and "role" in item for item in messages):
        return None
    return messages_text(text, decoded=messages) or ""


def _json_string(attrs: Mapping[str, AttributeValue], text: str) -> str | None:
    """An `output.value` declared JSON (`output.mime_type`) that is a JSON string: the
    string (DSPy serialises a tool's text result so, quotes and escapes included)."""
    if lower(attrs.get(c.OI_OUTPUT_MIME_TYPE)) != "application/json":
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


def answer_field(attrs: Mapping[str, AttributeValue]) -> str | None:
    """The answer text of a non-tool span's `output.value` that is a serialised run result
    (a JSON object with a text field of `_ANSWER_FIELDS`); None otherwise. Not for tools:
    a tool's whole result is its output."""
    decoded = json_object(attrs.get(c.OI_OUTPUT_VALUE))
    if decoded is None:
        return None
    for field in _ANSWER_FIELDS:
        value = decoded.get(field)
        if isinstance(value, str) and value.strip():
            return value
    return None


_METHOD_SUFFIX = re.compile(
    r"^(?P<name>.+?)\.(?:__call__|a?call|a?forward|_?a?run|run_sync|run_stream|a?invoke"
    r"|a?execute|a?step)$"
)
"""A span named after the object and the method called on it: OpenInference
instrumentors name AGENT spans so (smolagents `manager.run`) and tool spans too (DSPy
`census_lookup.__call__`), without `agent.name` or `tool.name`."""


def without_method(span_name: str) -> str | None:
    """The object a span is named after, less the method called (`manager.run` →
    `manager`); None when the name ends in no method."""
    match = _METHOD_SUFFIX.match(span_name.strip())
    if match is None:
        return None
    return match.group("name").strip() or None


def tool_named_by_span(span_name: str) -> str | None:
    """A tool span that names no tool (`tool.name`): the tool its span is named after,
    less the method called (DSPy's `census_lookup.__call__`)."""
    return without_method(span_name)


_DSPY_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]")
_DSPY_COMPLETED = "completed"
"""The ChatAdapter's end marker, `[[ ## completed ## ]]`: no field."""


def dspy_fields_text(text: str) -> str | None:
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
        fields = json_object(text) or {}
    if not fields:
        return None
    name = fields.get("next_tool_name")
    if not isinstance(name, str) or not name.strip():
        lines = [f"{field}: {value}" for field, value in fields.items() if value != ""]
        return "\n".join(lines) if lines and "[[ ## " in text else None
    arguments = fields.get("next_tool_args")
    arguments_text = arguments if isinstance(arguments, str) else as_text(arguments)
    thought = as_text(fields.get("next_thought"))
    call = tool_call_text(name.strip(), arguments_text or "{}")
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
        texts = [text for block in blocks if (text := part_text(block)) is not None]
        return "\n".join(texts) if texts else _content_text(value.get("raw_output"))
    messages = value.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        last = messages[-1]
        return _unwrapped_text(last, depth=depth + 1) or (
            message_text(last) if "role" in last else None
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
        texts = [text for part in content["parts"] if (text := part_text(part)) is not None]
        return "\n".join(texts) if texts else None
    return None


def _content_text(content: object) -> str | None:
    if isinstance(content, list):
        texts = [text for part in content if (text := part_text(part)) is not None]
        return "\n".join(texts) if texts else None
    return as_text(content)


def prepares_model_call(attrs: Mapping[str, AttributeValue], oi_kind: str, flattened: bool) -> bool:
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
    output = json_object(attrs.get(c.OI_OUTPUT_VALUE))
    return output is not None and isinstance(output.get("messages"), list)
