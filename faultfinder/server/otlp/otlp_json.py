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

from faultfinder.server.errors import DecodeError

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


def parse_request_json(body: bytes) -> ExportTraceServiceRequest:
    """Parse an OTLP/JSON trace request; unknown fields are ignored (forward compatibility).

    Raises DecodeError, saying where, for anything that is not an OTLP/JSON request.
    """
    message = ExportTraceServiceRequest()
    _parse_json(body, message, _id_holders)
    return message


def parse_logs_request_json(body: bytes) -> ExportLogsServiceRequest:
    """Parse an OTLP/JSON log request, as `parse_request_json` a trace request."""
    message = ExportLogsServiceRequest()
    _parse_json(body, message, _log_record_holders)
    return message


def _parse_json(
    body: bytes,
    message: Message,
    holders: Callable[[dict[str, Any]], Iterator[tuple[dict[str, Any], str]]],
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
    for holder, where in holders(document):
        _hex_ids_to_base64(holder, where)
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise DecodeError(f"invalid OTLP/JSON: {exc}") from None
    except UNDECODABLE as exc:
        raise DecodeError(f"invalid OTLP/JSON: {exc!r}") from None


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
