"""Messages an instrumentation records as span events instead of attributes.

The GenAI conventions have carried a model call's messages three ways. Today's are the
`gen_ai.input.messages` / `gen_ai.output.messages` attributes, which `mapping.py` reads.
Before them, and still by default in frameworks that trace themselves (Strands Agents,
Semantic Kernel), the messages were span events:

- one event per message sent: `gen_ai.system.message`, `gen_ai.user.message`,
  `gen_ai.assistant.message`, `gen_ai.tool.message` (attributes `content`, `role`, `id`,
  `tool_calls`), and one `gen_ai.choice` per answer (`message`, `finish_reason`);
- one `gen_ai.client.inference.operation.details` event holding the attributes of
  today's conventions (`gen_ai.input.messages`, …), where the attributes would be too
  large or too sensitive for the span;
- `gen_ai.content.prompt` / `gen_ai.content.completion` with `gen_ai.prompt` /
  `gen_ai.completion`.

`event_attributes` reads them into the attributes of today's conventions, as GenAI
messages (`[{role, parts}]`), so everything downstream reads one shape. A message's
content may be text, JSON text, OpenAI-shaped, or content blocks as Amazon Bedrock
writes them (`{"text"}`, `{"toolUse"}`, `{"toolResult"}`, which Strands records). Pure
functions; what is not understood is kept as text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from faultfinder import conventions as c
from faultfinder.reading.messages import as_text, lower, part_text
from faultfinder.reading.model import AttributeValue, SpanEvent, SpanRecord

__all__ = ["event_attributes"]

_MESSAGE_EVENTS = {
    c.EVENT_GEN_AI_SYSTEM_MESSAGE: "system",
    c.EVENT_GEN_AI_USER_MESSAGE: "user",
    c.EVENT_GEN_AI_ASSISTANT_MESSAGE: "assistant",
    c.EVENT_GEN_AI_TOOL_MESSAGE: "tool",
}
_EVENT_NAMES = frozenset(
    (
        *_MESSAGE_EVENTS,
        c.EVENT_GEN_AI_CHOICE,
        c.EVENT_GEN_AI_OPERATION_DETAILS,
        c.EVENT_GEN_AI_CONTENT_PROMPT,
        c.EVENT_GEN_AI_CONTENT_COMPLETION,
    )
)
_MESSAGE_KEYS = (
    c.GEN_AI_INPUT_MESSAGES,
    c.GEN_AI_OUTPUT_MESSAGES,
    c.GEN_AI_SYSTEM_INSTRUCTIONS,
)


def event_attributes(span: SpanRecord) -> Mapping[str, AttributeValue]:
    """The span's attributes, with the messages its events carry added in today's GenAI
    attributes where the span has none of its own: `span.attributes` itself when its
    events carry no messages (the common case costs one look at the event names)."""
    attrs = span.attributes
    if not span.events or not any(event.name in _EVENT_NAMES for event in span.events):
        return attrs
    found = _read(
        span.events, tool_span=lower(attrs.get(c.GEN_AI_OPERATION_NAME)) == "execute_tool"
    )
    added = {key: value for key, value in found.items() if attrs.get(key) is None}
    return {**attrs, **added} if added else attrs


def _read(events: tuple[SpanEvent, ...], *, tool_span: bool) -> dict[str, AttributeValue]:
    inputs: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    found: dict[str, AttributeValue] = {}
    for event in events:
        attrs = event.attributes
        if event.name == c.EVENT_GEN_AI_OPERATION_DETAILS:
            for key in _MESSAGE_KEYS:
                if attrs.get(key) is not None:
                    found.setdefault(key, attrs[key])
        elif tool_span and event.name in (c.EVENT_GEN_AI_TOOL_MESSAGE, c.EVENT_GEN_AI_CHOICE):
            _tool_event(event, found)
        elif event.name in _MESSAGE_EVENTS:
            role = lower(attrs.get("role")) or _MESSAGE_EVENTS[event.name]
            inputs.append(_message(role, attrs.get("content"), attrs))
        elif event.name == c.EVENT_GEN_AI_CHOICE:
            outputs.append(_choice(attrs.get("message")))
        elif event.name == c.EVENT_GEN_AI_CONTENT_PROMPT:
            inputs.append(_message("user", attrs.get(c.GEN_AI_PROMPT), attrs))
        elif event.name == c.EVENT_GEN_AI_CONTENT_COMPLETION:
            outputs.append(_message("assistant", attrs.get(c.GEN_AI_COMPLETION), attrs))
    if inputs:
        found.setdefault(c.GEN_AI_INPUT_MESSAGES, inputs)
    if outputs:
        found.setdefault(c.GEN_AI_OUTPUT_MESSAGES, outputs)
    return found


def _tool_event(event: SpanEvent, found: dict[str, AttributeValue]) -> None:
    """On a tool's own span (Strands): the tool message is the call's arguments, the
    choice the tool's result."""
    if event.name == c.EVENT_GEN_AI_TOOL_MESSAGE:
        if (arguments := as_text(event.attributes.get("content"))) is not None:
            found.setdefault(c.GEN_AI_TOOL_CALL_ARGUMENTS, arguments)
    elif (result := _blocks_text(event.attributes.get("message"))) is not None:
        found.setdefault(c.GEN_AI_TOOL_CALL_RESULT, result)


def _choice(message: AttributeValue) -> dict[str, Any]:
    """A `gen_ai.choice` event's `message`: an OpenAI-shaped message, or its content."""
    decoded = _decoded(message)
    if isinstance(decoded, dict) and ("content" in decoded or "tool_calls" in decoded):
        role = lower(decoded.get("role")) or "assistant"
        return _message(role, decoded.get("content"), decoded)
    return _message("assistant", message, {})


def _message(role: str, content: AttributeValue, fields: Mapping[str, Any]) -> dict[str, Any]:
    """One GenAI message (`{role, parts}`) from a content value and the event's (or the
    message's) other fields: a tool message's `id`, an assistant's OpenAI-shaped
    `tool_calls`."""
    # A tool's report names its call by `id` (the conventions) or `tool_call_id` (the
    # OpenAI message Semantic Kernel logs as it is).
    call_id = as_text(fields.get("id") or fields.get("tool_call_id")) if role == "tool" else None
    parts = _parts(content, call_id=call_id)
    for call in _decoded(fields.get("tool_calls")) or ():
        if isinstance(call, dict):
            function = call.get("function")
            named = function if isinstance(function, dict) else call
            parts.append(
                {
                    "type": "tool_call",
                    "id": as_text(call.get("id")),
                    "name": as_text(named.get("name")),
                    "arguments": named.get("arguments"),
                }
            )
    return {"role": role, "parts": parts}


def _parts(content: AttributeValue, *, call_id: str | None) -> list[dict[str, Any]]:
    decoded = _decoded(content)
    if decoded is None:
        return []
    blocks = decoded if isinstance(decoded, list) else [decoded]
    parts: list[dict[str, Any]] = []
    for block in blocks:
        part = _block_part(block)
        if part is not None:
            parts.append(part)
    if call_id is not None:
        # A tool message answers one call: its text is that call's report.
        text = "\n".join(p["content"] for p in parts if p.get("type") == "text")
        responses = [p for p in parts if p.get("type") == "tool_call_response"]
        if not responses and text:
            return [{"type": "tool_call_response", "id": call_id, "response": text}]
    return parts


def _block_part(block: object) -> dict[str, Any] | None:
    """One content block as a GenAI part."""
    if isinstance(block, str):
        return {"type": "text", "content": block}
    if not isinstance(block, dict):
        text = as_text(block)
        return {"type": "text", "content": text} if text is not None else None
    if isinstance(use := block.get("toolUse"), dict):
        return {
            "type": "tool_call",
            "id": as_text(use.get("toolUseId")),
            "name": as_text(use.get("name")),
            "arguments": use.get("input"),
        }
    if isinstance(result := block.get("toolResult"), dict):
        return {
            "type": "tool_call_response",
            "id": as_text(result.get("toolUseId")),
            "response": _blocks_text(result.get("content")) or "",
        }
    if "type" in block:
        # Already a GenAI part (or an OpenAI-shaped one `messages.part_text` reads).
        return block
    text = block.get("text", block.get("content"))
    if text is not None:
        return {"type": "text", "content": as_text(text)}
    # A block of another kind (an image, a document, reasoning): its JSON.
    return {"type": "text", "content": as_text(block)}


def _blocks_text(value: object) -> str | None:
    """The text of content blocks (a tool's result as Strands records it)."""
    decoded = _decoded(value)
    if decoded is None:
        return None
    blocks = decoded if isinstance(decoded, list) else [decoded]
    texts: list[str] = []
    for block in blocks:
        part = _block_part(block)
        text = part_text(part) if part is not None else None
        if text is not None:
            texts.append(text)
    return "\n".join(texts) if texts else None


def _decoded(value: object) -> Any:
    """A JSON text decoded (a list or an object only); anything else as it is."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("[", "{"):
            try:
                decoded = orjson.loads(stripped)
            except orjson.JSONDecodeError:
                return value
            return decoded if isinstance(decoded, list | dict) else value
    return value
