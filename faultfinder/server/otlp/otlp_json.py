"""OTLP/JSON, read and written: protobuf's JSON mapping of an `ExportTraceServiceRequest`
(lowerCamelCase keys, integer enums, 64-bit integers as strings) except that trace and
span ids are hex strings where proto3 JSON writes base64.

The receiver parses bodies with `parse_request_json`; `bench ingest`, `bench replay` and
the tests write them with `request_to_otlp_json`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import Error as ProtobufError
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from faultfinder.server.errors import DecodeError, TooManySpansError
from faultfinder.server.otlp.deep_values import cut_deep_json_values, is_too_deep
from faultfinder.server.otlp.wire_limits import (
    MAX_ATTRIBUTES_PER_SPAN,
    MAX_EVENTS_PER_SPAN,
    MAX_FIELDS_PER_REQUEST,
    MAX_LINKS_PER_SPAN,
)

__all__ = ["UNDECODABLE", "parse_logs_request_json", "parse_request_json", "request_to_otlp_json"]

UNDECODABLE = (
    ProtobufError,
    json_format.ParseError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    RecursionError,
    OverflowError,
)
"""Exceptions that the protobuf and JSON parsers (and a walk over their output) raise on
hostile input; all of them mean "this body cannot be decoded"."""

_ID_FIELDS = ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id")
"""The id fields of spans and links, as OTLP/JSON writes them and as protobuf's JSON
parser also accepts them."""


def request_to_otlp_json(request: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON body of `request`, as an OTLP/HTTP JSON exporter sends it."""
    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    for holder, _where in _id_holders(document):
        for key in _ID_FIELDS:
            if key in holder:
                holder[key] = base64.b64decode(holder[key]).hex()
    return orjson.dumps(document)


def parse_request_json(body: bytes, *, max_spans: int | None = None) -> ExportTraceServiceRequest:
    """Parse an OTLP/JSON trace request; unknown fields are ignored (forward compatibility).

    Bounded before protobuf's (slow, pure Python) JSON parser sees it: a body of more
    than `MAX_FIELDS_PER_REQUEST` objects is refused unparsed, one of more than
    `max_spans` spans once read, and each span keeps its first events, links and
    attributes as `wire_limits.py` says (the others counted as dropped).
    Raises DecodeError, saying where, for anything that is not an OTLP/JSON request.
    """
    objects = body.count(b"{")  # at least one per object: a cheap bound before reading
    if objects > MAX_FIELDS_PER_REQUEST:
        raise TooManySpansError(objects, MAX_FIELDS_PER_REQUEST, counted="JSON objects")
    message = ExportTraceServiceRequest()
    _parse_json(body, message, _id_holders, bound=lambda doc: _bound_spans(doc, max_spans))
    return message


_JSON_CAPS = (
    ("attributes", ("droppedAttributesCount", "dropped_attributes_count")),
    ("events", ("droppedEventsCount", "dropped_events_count")),
    ("links", ("droppedLinksCount", "dropped_links_count")),
)
"""A span's capped lists, and the keys (camelCase first) counting what was dropped."""


def _bound_spans(document: dict[str, Any], max_spans: int | None) -> None:
    """Refuse a document of more than `max_spans` spans; cut over-full spans."""
    spans = [
        span
        for resource_spans in _items(document, "resourceSpans", "resource_spans")
        for scope_spans in _items(resource_spans, "scopeSpans", "scope_spans")
        for span in _items(scope_spans, "spans")
    ]
    if max_spans is not None and len(spans) > max_spans:
        raise TooManySpansError(len(spans), max_spans)
    caps = {"attributes": MAX_ATTRIBUTES_PER_SPAN, "events": MAX_EVENTS_PER_SPAN}
    caps["links"] = MAX_LINKS_PER_SPAN
    for span in spans:
        if not isinstance(span, dict):
            continue
        for key, dropped_keys in _JSON_CAPS:
            items = span.get(key)
            if not isinstance(items, list) or len(items) <= caps[key]:
                continue
            before = next((span.pop(k) for k in dropped_keys if k in span), 0)
            span[key] = items[: caps[key]]
            earlier = before if isinstance(before, int) else 0
            span[dropped_keys[0]] = earlier + len(items) - caps[key]


def parse_logs_request_json(body: bytes) -> ExportLogsServiceRequest:
    """Parse an OTLP/JSON log request, as `parse_request_json` a trace request."""
    message = ExportLogsServiceRequest()
    _parse_json(body, message, _log_record_holders)
    return message


def _parse_json(
    body: bytes,
    message: Message,
    holders: Callable[[dict[str, Any]], Iterator[tuple[dict[str, Any], str]]],
    bound: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Fill `message` from an OTLP/JSON `body`, the hex ids of `holders(document)` first
    rewritten as protobuf's JSON mapping expects them."""
    try:
        document = json.loads(body)
    except RecursionError:
        raise DecodeError("invalid JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise DecodeError(f"invalid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise DecodeError(
            f"invalid OTLP/JSON: expected an object at the top level, got {type(document).__name__}"
        )
    if bound is not None:
        bound(document)
    for holder, where in holders(document):
        _hex_ids_to_base64(holder, where)
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        # Too deep for protobuf: cut the deep values as the wire format's are, parse again.
        if not is_too_deep(exc) or not cut_deep_json_values(document):
            raise DecodeError(f"invalid OTLP/JSON: {_brief(exc)}") from None
        message.Clear()
        try:
            json_format.ParseDict(document, message, ignore_unknown_fields=True)
        except json_format.ParseError as again:
            raise DecodeError(f"invalid OTLP/JSON: {_brief(again)}") from None
    except UNDECODABLE as exc:
        raise DecodeError(f"invalid OTLP/JSON: {exc!r}") from None


def _brief(error: Exception) -> str:
    """protobuf's complaint without its "Failed to parse X field: " once a level."""
    text = str(error)
    return text if len(text) <= 500 else f"{text[:200]} … {text[-200:]}"


def _log_record_holders(document: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    """The log records of an OTLP/JSON log request, each with where it stands."""
    for r, resource_logs in enumerate(_items(document, "resourceLogs", "resource_logs")):
        for s, scope_logs in enumerate(_items(resource_logs, "scopeLogs", "scope_logs")):
            for n, record in enumerate(_items(scope_logs, "logRecords", "log_records")):
                if isinstance(record, dict):
                    yield record, f"resourceLogs[{r}].scopeLogs[{s}].logRecords[{n}]"


def _id_holders(document: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    """The spans and links of an OTLP/JSON document, each with where it stands."""
    for r, resource_spans in enumerate(_items(document, "resourceSpans", "resource_spans")):
        scopes = _items(resource_spans, "scopeSpans", "scope_spans")
        for s, scope_spans in enumerate(scopes):
            for n, span in enumerate(_items(scope_spans, "spans")):
                where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{n}]"
                if isinstance(span, dict):
                    yield span, where
                for k, link in enumerate(_items(span, "links")):
                    if isinstance(link, dict):
                        yield link, f"{where}.links[{k}]"


def _items(container: object, *keys: str) -> list[Any]:
    # Wrong shapes are left for ParseDict to report with its own precise message.
    if not isinstance(container, dict):
        return []
    for key in keys:
        value = container.get(key)
        if isinstance(value, list):
            return value
    return []


def _hex_ids_to_base64(holder: dict[str, Any], where: str) -> None:
    """Rewrite OTLP/JSON's hex ids into the base64 that protobuf's JSON mapping expects."""
    for key in _ID_FIELDS:
        value = holder.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise DecodeError(f"{where}.{key}: expected a hex string, got {type(value).__name__}")
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raise DecodeError(f"{where}.{key}: {value[:40]!r} is not a hex id") from None
        holder[key] = base64.b64encode(raw).decode("ascii")
