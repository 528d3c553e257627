"""The text of messages as the conventions carry them: OpenTelemetry GenAI messages
(`[{role, parts: [{type, content}]}]` JSON, and the OpenAI shape with `tool_calls`) and
OpenInference's flattened `llm.input_messages.N.message.*` attributes. Tool calls read as
`tool(arguments)`. Pure functions; malformed values fall back to their raw text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from faultfinder import conventions as c
from faultfinder.reading.model import AttributeValue

__all__ = [
    "OI_FLATTENED_PREFIXES",
    "ToolReport",
    "as_text",
    "decode_messages",
    "json_list",
    "last_reply_text",
    "later_user_turns",
    "lower",
    "message_text",
    "messages_text",
    "openinference_messages",
    "openinference_messages_text",
    "part_text",
    "text_blocks",
    "tool_call_text",
    "tool_reports",
    "upper",
]


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


def lower(value: AttributeValue) -> str:
    return value.strip().lower() if isinstance(value, str) else ""


def upper(value: AttributeValue) -> str:
    return value.strip().upper() if isinstance(value, str) else ""


# --- GenAI messages (`[{role, parts: [{type, content}]}]` as JSON) ---------------------


def decode_messages(value: AttributeValue) -> list[Any] | None:
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


def messages_text(
    value: AttributeValue, *, role: str | None = None, decoded: list[Any] | None = _UNDECODED
) -> str | None:
    """Text of GenAI-semconv messages; with `role`, of the first message in that role.

    A value that is not JSON is returned as it is (unless a role is asked for).
    `decoded` is `decode_messages(value)` when the caller already has it.
    """
    if value is None:
        return None
    messages = decode_messages(value) if decoded is _UNDECODED else decoded
    if messages is None:
        return None if role else as_text(value)
    texts: list[str] = []
    for message in messages:
        if role is not None:
            if isinstance(message, dict) and lower(message.get("role")) == role:
                return message_text(message)
            continue
        text = message_text(message)
        if text is not None:
            texts.append(text)
    return "\n".join(texts) if texts else None


def last_reply_text(messages: list[Any] | None) -> str | None:
    """Of GenAI messages (decoded) that are an agent's whole response (its tool calls,
    the tools' reports, then its answer, as Microsoft Agent Framework records an agent's
    output), the text of the assistant's messages after the last tool call or report;
    None when the messages hold no tool call or report, or nothing is said after them."""
    if not messages or len(messages) < 2:  # a reply after tool work takes two at least
        return None
    last_tool = max((n for n, message in enumerate(messages) if _tool_work(message)), default=None)
    if last_tool is None:
        return None
    texts: list[str] = []
    for message in messages[last_tool + 1 :]:
        if not isinstance(message, dict) or lower(message.get("role")) not in _ASSISTANT_ROLES:
            continue
        parts = message.get("parts")
        if isinstance(parts, list):
            texts.extend(t for p in parts if _is_text(p) and (t := part_text(p)) and t.strip())
    return "\n".join(texts) if texts else None


def _tool_work(message: object) -> bool:
    """A message that calls a tool or reports one's answer."""
    if not isinstance(message, dict):
        return False
    if lower(message.get("role")) == "tool" or message.get("tool_calls"):
        return True
    parts = message.get("parts")
    return isinstance(parts, list) and any(
        isinstance(p, dict) and lower(p.get("type")) in ("tool_call", "tool_call_response")
        for p in parts
    )


def _is_text(part: object) -> bool:
    return isinstance(part, dict) and lower(part.get("type")) in ("", "text")


_ASSISTANT_ROLES = frozenset({"assistant", "model", "ai"})
_USER_ROLES = frozenset({"user", "human"})


def later_user_turns(messages: list[Any] | None) -> tuple[tuple[str, str], ...]:
    """The user's messages that follow one of the assistant's, in a model call's input
    that carries the conversation so far, each with the text of the assistant's message it
    answers: (answered, turn). A user message with a `name` other than the user's is
    another participant speaking in the user's role (a group chat's agent), not the user."""
    turns: list[tuple[str, str]] = []
    answered: str | None = None
    for message in messages or ():
        if not isinstance(message, dict):
            continue
        role = lower(message.get("role"))
        if role in _ASSISTANT_ROLES:
            answered = message_text(message) or ""
        elif (
            answered is not None
            and role in _USER_ROLES
            and _unnamed(message.get("name"))
            and not _only_tool_reports(message.get("parts"))
        ):
            text = message_text(message)
            if text and text.strip():
                turns.append((answered, text))
    return tuple(turns)


@dataclass(frozen=True, slots=True)
class ToolReport:
    """A tool's report in a model call's input: the call it answers (the tool and its
    arguments, as the assistant's message asking for it gave them) and what the tool
    answered."""

    tool_name: str
    arguments: str | None
    report: str


def tool_reports(messages: list[Any] | None) -> tuple[ToolReport, ...]:
    """The tools' reports in a model call's input that carries the conversation so far,
    each matched by its call id to the assistant's call it answers: GenAI messages
    (`tool_call` and `tool_call_response` parts) or OpenAI-shaped ones (`tool_calls` and
    a `tool` message with its `tool_call_id`). A report whose call is not in the input is
    left out."""
    calls: dict[str, tuple[str, str | None]] = {}
    reports: list[ToolReport] = []
    for message in messages or ():
        if not isinstance(message, dict):
            continue
        role = lower(message.get("role"))
        parts = message.get("parts")
        if role in _ASSISTANT_ROLES:
            for call_id, name, arguments in _calls_of(message, parts):
                calls[call_id] = (name, arguments)
        elif role == "tool" or (
            role in _USER_ROLES and isinstance(parts, list) and any(map(_is_response, parts))
        ):
            # Tools answer in the tool's role, or (as Amazon Bedrock's and Anthropic's
            # APIs want them, and Strands Agents records them) in the user's.
            answers = (
                [(p.get("id"), p.get("response")) for p in parts if _is_response(p)]
                if isinstance(parts, list)
                else [(message.get("tool_call_id"), message.get("content"))]
            )
            for answered, response in answers:
                called = calls.get(answered) if isinstance(answered, str) else None
                text = text_blocks(response) or as_text(response)
                if called is not None and text is not None:
                    tool, given = called
                    reports.append(ToolReport(tool, given, text))
    return tuple(reports)


def _only_tool_reports(parts: object) -> bool:
    """A message's parts are tools' reports only: a message in the user's role that
    carries tools' answers (as Amazon Bedrock's and Anthropic's APIs want them), which is
    no turn of the user's."""
    return isinstance(parts, list) and bool(parts) and all(map(_is_response, parts))


def _is_response(part: object) -> bool:
    return isinstance(part, dict) and lower(part.get("type")) == "tool_call_response"


def _calls_of(message: dict[str, Any], parts: object) -> list[tuple[str, str, str | None]]:
    """(id, name, arguments) of each tool call an assistant's message makes."""
    found: list[tuple[str, str, str | None]] = []
    if isinstance(parts, list):
        for part in parts:
            if isinstance(part, dict) and lower(part.get("type")) == "tool_call":
                call_id, name = part.get("id"), part.get("name")
                if isinstance(call_id, str) and isinstance(name, str):
                    found.append((call_id, name, as_text(part.get("arguments"))))
        return found
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and isinstance(call.get("id"), str):
            name = function.get("name")
            if isinstance(name, str):
                found.append((call["id"], name, as_text(function.get("arguments"))))
    return found


def _unnamed(name: object) -> bool:
    return name is None or (isinstance(name, str) and lower(name) in ("", *_USER_ROLES))


def message_text(message: object) -> str | None:
    if isinstance(message, str):
        return message
    if not isinstance(message, dict):
        return None
    pieces: list[str] = []
    parts = message.get("parts")
    if isinstance(parts, list):
        pieces.extend(text for part in parts if (text := part_text(part)) is not None)
    else:
        # Older and OpenAI-style messages carry `content` directly.
        content = message.get("content", message.get(c.OI_MESSAGE_CONTENT))
        if isinstance(content, list):
            pieces.extend(text for part in content if (text := part_text(part)) is not None)
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
            texts.append(tool_call_text(named.get("name"), named.get("arguments")))
    return texts


def part_text(part: object) -> str | None:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return None
    part_type = lower(part.get("type")) or "text"
    if part_type == "text":
        text = part.get("content", part.get("text"))
        return as_text(text) if text is not None else None
    if part_type == "tool_call":
        return tool_call_text(part.get("name"), part.get("arguments"))
    if part_type == "tool_call_response":
        response = part.get("response")
        return text_blocks(response) or as_text(response)
    if part_type in ("function", "function_call"):
        # An OpenAI-shaped call among the parts (a chat `tool_calls` entry, a
        # Responses `function_call` item).
        return next(iter(_openai_tool_calls_text([part])), None)
    return None


def text_blocks(value: object) -> str | None:
    """The text of a list of text content blocks (`{"text": …}` as Strands Agents and
    Amazon Bedrock write a tool's result, `{"type": "text", "text": …}` as MCP does),
    joined by newlines; None for anything else (another kind of block among them)."""
    if not isinstance(value, list) or not value:
        return None
    texts: list[str] = []
    for block in value:
        if not isinstance(block, dict) or not isinstance(block.get("text"), str):
            return None
        if set(block) - {"text", "type"} or block.get("type", "text") != "text":
            return None
        texts.append(block["text"])
    return "\n".join(texts)


def json_list(text: str) -> list[Any] | None:
    """`text` decoded as a JSON list; None when it is not one."""
    if not text.lstrip().startswith("["):
        return None
    try:
        decoded = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return decoded if isinstance(decoded, list) else None


def tool_call_text(name: object, arguments: object) -> str:
    return f"{as_text(name) or 'tool'}({as_text(arguments) or ''})"


# --- OpenInference flattened messages (`llm.output_messages.N.message.content`) ------------

_OI_MESSAGE_KEY = re.compile(r"^(\d+)\.(.+)$")
_OI_CONTENT_PART = re.compile(
    rf"^{re.escape(c.OI_MESSAGE_CONTENTS)}\.(\d+)\.{re.escape(c.OI_MESSAGE_CONTENT_TEXT)}$"
)
_OI_TOOL_CALL_FIELD = re.compile(rf"^{re.escape(c.OI_MESSAGE_TOOL_CALLS)}\.(\d+)\.(.+)$")


OI_FLATTENED_PREFIXES = (c.OI_LLM_INPUT_MESSAGES + ".", c.OI_LLM_OUTPUT_MESSAGES + ".")


def openinference_messages_text(
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
        return messages_text(unflattened, role=role)
    if not flattened:
        return None
    texts: list[str] = []
    for fields in _openinference_messages(attrs, prefix):
        if role is not None and lower(fields.get(c.OI_MESSAGE_ROLE)) != role:
            continue
        text = _openinference_message_text(fields)
        if role is not None:
            return text
        if text is not None:
            texts.append(text)
    return "\n".join(texts) if texts else None


def openinference_messages(
    attrs: Mapping[str, AttributeValue], prefix: str, *, flattened: bool = True
) -> list[Any] | None:
    """The messages of `prefix` (a JSON list), or of its flattened `prefix.N.message.*`
    attributes, each read as the OpenAI-shaped message it stands for (`role`, `name`,
    `content`, `tool_calls` with their ids, `tool_call_id`), for `later_user_turns` and
    `tool_reports`. `flattened=False` says no attribute starts with either message prefix
    (no scan). None when there are none."""
    unflattened = attrs.get(prefix)
    if unflattened is not None:
        return decode_messages(unflattened)
    if not flattened:
        return None
    return [_openai_shaped(fields) for fields in _openinference_messages(attrs, prefix)] or None


def _openai_shaped(fields: Mapping[str, AttributeValue]) -> dict[str, Any]:
    """One flattened OpenInference message as the OpenAI-shaped message it stands for."""
    calls: dict[int, dict[str, AttributeValue]] = {}
    for key, value in fields.items():
        if match := _OI_TOOL_CALL_FIELD.match(key):
            calls.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return {
        "role": fields.get(c.OI_MESSAGE_ROLE),
        "name": fields.get(c.OI_MESSAGE_NAME),
        "content": _openinference_content_text(fields),
        "tool_call_id": fields.get(c.OI_MESSAGE_TOOL_CALL_ID),
        "tool_calls": [
            {
                "id": calls[m].get(c.OI_TOOL_CALL_ID),
                "function": {
                    "name": calls[m].get(c.OI_TOOL_CALL_FUNCTION_NAME),
                    "arguments": calls[m].get(c.OI_TOOL_CALL_FUNCTION_ARGUMENTS),
                },
            }
            for m in sorted(calls)
        ],
    }


def _openinference_messages(
    attrs: Mapping[str, AttributeValue], prefix: str
) -> list[dict[str, AttributeValue]]:
    """The flattened `prefix.N.message.*` attributes as one field map per message, in N
    order (the `message.` suffixes as keys)."""
    messages: dict[int, dict[str, AttributeValue]] = {}
    start = prefix + "."
    for key, value in attrs.items():
        if key.startswith(start) and (match := _OI_MESSAGE_KEY.match(key[len(start) :])):
            messages.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return [messages[n] for n in sorted(messages)]


def _openinference_message_text(fields: Mapping[str, AttributeValue]) -> str | None:
    return message_text(_openai_shaped(fields))


def _openinference_content_text(fields: Mapping[str, AttributeValue]) -> str | None:
    """A flattened message's text: `message.content`, else its multimodal parts' texts."""
    content = as_text(fields.get(c.OI_MESSAGE_CONTENT))
    if content is not None:
        return content
    parts: dict[int, str] = {}
    for key, value in fields.items():
        if (match := _OI_CONTENT_PART.match(key)) and (text := as_text(value)) is not None:
            parts[int(match.group(1))] = text
    return "\n".join(parts[m] for m in sorted(parts)) if parts else None
