"""Attribute values nested too deep for protobuf's parser, cut on the wire.

protobuf's parser refuses a message nested more than 100 deep, and each level of an
OTLP array or kvlist value is three messages (AnyValue → ArrayValue/KeyValueList →
KeyValue → AnyValue), so a span attribute nested about 31 levels deep makes the whole
request unparseable. The README promises that a value nested too deep is cut with a
visible `[nested too deep]`, not that the request is refused; so when the parser refuses
a request for its depth, this pass rewrites the request's bytes, replacing each array or
kvlist value nested `WIRE_VALUE_DEPTH` or more levels deep by the string
`[nested too deep]`, and the request is parsed again. Only the messages that lead to
attribute values are walked (resources, scopes, spans, events, links, log records); any
other field is copied as it is. The pass runs only after such a refusal: every other
request never pays for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from google.protobuf.message import DecodeError as ProtobufDecodeError

from faultfinder.server.errors import DecodeError
from faultfinder.server.otlp.wire_limits import _encode_varint, _skip, _varint

__all__ = [
    "NESTED_TOO_DEEP",
    "WIRE_VALUE_DEPTH",
    "cut_deep_json_values",
    "cut_deep_values",
    "is_too_deep",
    "parse_cutting_deep_values",
]

_Message = TypeVar("_Message")

NESTED_TOO_DEEP = "[nested too deep]"
"""What replaces an array or kvlist nested too deep (here, and in `decode.py` past
`MAX_VALUE_DEPTH`)."""

WIRE_VALUE_DEPTH = 30
"""Depth (0 = an attribute's own value) from which an array or kvlist value is cut on
the wire. An event's attribute value sits seven messages down and each level adds three,
so a value at this depth fits in protobuf's 100 messages (97)."""

_LEN = 2

# A message's LEN fields that lead to attribute values, by message kind: field → kind.
_TRACE, _LOGS = "trace", "logs"
_SCHEMA: dict[str, dict[int, str]] = {
    _TRACE: {1: "resource_spans"},
    _LOGS: {1: "resource_logs"},
    "resource_spans": {1: "resource", 2: "scope_spans"},
    "resource_logs": {1: "resource", 2: "scope_logs"},
    "resource": {1: "key_value"},
    "scope_spans": {1: "scope", 2: "span"},
    "scope_logs": {1: "scope", 2: "log_record"},
    "scope": {3: "key_value"},
    "span": {9: "key_value", 11: "event", 13: "link"},
    "event": {3: "key_value"},
    "link": {5: "key_value"},
    "log_record": {5: "any_value", 6: "key_value"},
    "key_value": {2: "any_value"},
    "array_value": {1: "any_value"},
    "kvlist_value": {1: "key_value"},
}
_NESTED = {5: "array_value", 6: "kvlist_value"}
"""AnyValue's container fields: a level deeper."""

_CUT = b"\x0a" + _encode_varint(len(NESTED_TOO_DEEP.encode())) + NESTED_TOO_DEEP.encode()
"""An AnyValue holding `string_value = "[nested too deep]"`."""


def is_too_deep(error: Exception) -> bool:
    """Whether protobuf's parser (binary, or its JSON mapping) refused a body for its
    nesting depth."""
    text = str(error)
    return "MaxDepth" in text or "Message too deep" in text


class _Cutter:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.cut = 0

    def message(self, kind: str, start: int, end: int, depth: int) -> bytes:
        """`data[start:end]`, a message of `kind`, with its deep values cut."""
        data = self.data
        if kind == "any_value":
            return self.any_value(start, end, depth)
        children = _SCHEMA[kind]
        out: list[bytes] = []
        pos = copied = start
        while pos < end:
            key, value_at = _varint(data, pos)
            field, wire_type = key >> 3, key & 7
            after = _skip(data, value_at, wire_type, end)
            child = children.get(field)
            if child is not None and wire_type == _LEN:
                body_at = _varint(data, value_at)[1]
                rewritten = self.message(child, body_at, after, depth)
                if rewritten != data[body_at:after]:
                    out.append(data[copied:value_at])
                    out.append(_encode_varint(len(rewritten)) + rewritten)
                    copied = after
            pos = after
        if not out:
            return data[start:end]
        out.append(data[copied:end])
        return b"".join(out)

    def any_value(self, start: int, end: int, depth: int) -> bytes:
        data = self.data
        pos = start
        while pos < end:
            key, value_at = _varint(data, pos)
            field, wire_type = key >> 3, key & 7
            after = _skip(data, value_at, wire_type, end)
            if field in _NESTED and wire_type == _LEN:
                if depth >= WIRE_VALUE_DEPTH:
                    self.cut += 1
                    return _CUT
                body_at = _varint(data, value_at)[1]
                rewritten = self.message(_NESTED[field], body_at, after, depth + 1)
                if rewritten == data[body_at:after]:
                    return data[start:end]
                return (
                    data[start:value_at]
                    + _encode_varint(len(rewritten))
                    + rewritten
                    + data[after:end]
                )
            pos = after
        return data[start:end]


def cut_deep_values(body: bytes, *, logs: bool = False) -> tuple[bytes, int]:
    """The request (`ExportTraceServiceRequest`, or `ExportLogsServiceRequest` if `logs`)
    with every array or kvlist value nested `WIRE_VALUE_DEPTH` or more levels deep
    replaced by `[nested too deep]`, and how many were; DecodeError if the bytes are not
    a well-formed message."""
    cutter = _Cutter(body)
    try:
        rewritten = cutter.message(_LOGS if logs else _TRACE, 0, len(body), 0)
    except IndexError:
        raise DecodeError("invalid protobuf request: truncated field") from None
    return rewritten, cutter.cut


def parse_cutting_deep_values(
    parse: Callable[[bytes], _Message], body: bytes, *, logs: bool = False
) -> tuple[_Message, int]:
    """`parse(body)`; if protobuf refuses it for its depth, `parse` of the body with its
    deep values cut (`cut_deep_values`). Returns the message and how many values were
    cut; any other refusal is raised as protobuf raised it."""
    try:
        return parse(body), 0
    except ProtobufDecodeError as error:
        if not is_too_deep(error):
            raise
    cut_body, cut = cut_deep_values(body, logs=logs)
    return parse(cut_body), cut


_JSON_CONTAINERS = ("arrayValue", "array_value", "kvlistValue", "kvlist_value")
_JSON_CHILDREN: dict[str, tuple[str, ...]] = {
    # What leads to attribute values in an OTLP/JSON document (either spelling).
    "document": ("resourceSpans", "resource_spans", "resourceLogs", "resource_logs"),
    "resource_spans": ("resource", "scopeSpans", "scope_spans"),
    "resource_logs": ("resource", "scopeLogs", "scope_logs"),
    "resource": ("attributes",),
    "scope_spans": ("scope", "spans"),
    "scope_logs": ("scope", "logRecords", "log_records"),
    "scope": ("attributes",),
    "span": ("attributes", "events", "links"),
    "event": ("attributes",),
    "link": ("attributes",),
    "log_record": ("body", "attributes"),
}
_JSON_KIND = {
    "resourceSpans": "resource_spans", "resource_spans": "resource_spans",
    "resourceLogs": "resource_logs", "resource_logs": "resource_logs",
    "resource": "resource", "scope": "scope",
    "scopeSpans": "scope_spans", "scope_spans": "scope_spans",
    "scopeLogs": "scope_logs", "scope_logs": "scope_logs",
    "spans": "span", "events": "event", "links": "link",
    "logRecords": "log_record", "log_records": "log_record",
}  # fmt: skip


def _cut_json_value(value: object, depth: int) -> int:
    if not isinstance(value, dict):
        return 0
    for name in _JSON_CONTAINERS:
        container = value.get(name)
        if container is None:
            continue
        if depth >= WIRE_VALUE_DEPTH:
            value.clear()
            value["stringValue"] = NESTED_TOO_DEEP
            return 1
        items = container.get("values") if isinstance(container, dict) else None
        cut = 0
        for item in items if isinstance(items, list) else ():
            # kvlist items are key-values holding a value; array items are values.
            inner = (
                item.get("value") if name.startswith("kvlist") and isinstance(item, dict) else item
            )
            cut += _cut_json_value(inner, depth + 1)
        return cut
    return 0


def _cut_json(node: object, kind: str) -> int:
    if not isinstance(node, dict):
        return 0
    cut = 0
    for field in _JSON_CHILDREN[kind]:
        child = node.get(field)
        if field == "attributes":
            for attribute in child if isinstance(child, list) else ():
                if isinstance(attribute, dict):
                    cut += _cut_json_value(attribute.get("value"), 0)
        elif field == "body":
            cut += _cut_json_value(child, 0)
        elif isinstance(child, list):
            cut += sum(_cut_json(item, _JSON_KIND[field]) for item in child)
        else:
            cut += _cut_json(child, _JSON_KIND[field])
    return cut


def cut_deep_json_values(document: dict[str, object]) -> int:
    """Cut, in place, every array or kvlist value of an OTLP/JSON request document nested
    `WIRE_VALUE_DEPTH` or more levels deep (as `cut_deep_values` does on the wire), and
    return how many were."""
    return _cut_json(document, "document")
