"""OTLP trace requests (protobuf, JSON, gRPC messages) → `SpanRecord`s, and the replies.

Every undecodable body raises `DecodeError` (never another exception type); spans that
are individually invalid are dropped and counted for an OTLP partial-success reply.
Attribute values that are too large or nested too deeply are cut down with a visible
marker rather than refusing the request (an agent's giant tool output is still a step).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from google.protobuf import json_format
from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from faultfinder import conventions as c
from faultfinder.reading.model import AttributeValue, SpanEvent, SpanRecord, StatusCode
from faultfinder.reading.runs import bound_identities, run_id_of
from faultfinder.server.errors import (
    BodyTooLargeError,
    DecodeError,
    TooManySpansError,
    UnsupportedEncodingError,
)
from faultfinder.server.otlp.compression import decompress
from faultfinder.server.otlp.deep_values import NESTED_TOO_DEEP, parse_cutting_deep_values
from faultfinder.server.otlp.otlp_json import UNDECODABLE, parse_request_json
from faultfinder.server.otlp.wire_limits import (
    SMALL_BODY,
    bound_request,
    cap_parsed,
    parser_complaint,
)

__all__ = [
    "DEFAULT_PROJECT",
    "MAX_MESSAGE_BYTES",
    "MAX_NAME_BYTES",
    "MAX_VALUE_BYTES",
    "MAX_VALUE_DEPTH",
    "NESTED_TOO_DEEP",
    "BodyTooLargeError",
    "DecodeError",
    "DecodedBatch",
    "UnsupportedEncodingError",
    "attributes_of",
    "decode_json",
    "decode_protobuf",
    "decode_request",
    "decompress",
    "encode_response",
    "project_of",
    "value_limits",
    "value_of",
]

DEFAULT_PROJECT = "default"
"""Project of spans whose request names none (no header, no resource attribute)."""

MAX_VALUE_BYTES = 1 << 20
"""Longest string or bytes attribute value kept whole (UTF-8 bytes); longer ones are cut
to this size and end with `…[truncated N bytes]`."""
MAX_VALUE_DEPTH = 32
"""Array/kvlist levels kept inside one attribute value; a deeper level becomes
`NESTED_TOO_DEEP`."""
MAX_NAME_BYTES = 4096
"""Longest span name, event name, attribute key, scope name and project kept whole (UTF-8
bytes); longer ones are cut like values and counted with them."""
MAX_MESSAGE_BYTES = 64 * 1024
"""Longest span status message kept whole (a stack trace fits)."""

_MAX_TIME_NS = 2**63 - 1
_TRACE_ID_BYTES = 16
_SPAN_ID_BYTES = 8
# OTLP `SpanFlags`: bit 8 says bit 9 is meaningful; bit 9 says the parent is remote.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
_MAX_REASONS = 3
"""Distinct rejection reasons quoted in the partial-success message."""


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """The valid spans of one request, and how many were rejected and why."""

    spans: list[SpanRecord]
    rejected: int = 0
    error_message: str = ""
    reasons: dict[str, int] = field(default_factory=dict)
    """Rejected spans by reason, e.g. `{"trace_id is 5 bytes, expected 16": 1}`."""
    truncated_values: int = 0
    """Attribute values cut to `max_value_bytes` or replaced for nesting too deeply, and
    events, links and attributes dropped from over-full spans (`wire_limits.py`)."""


@dataclass(slots=True)
class _ValueLimits:
    """The caps applied to attribute values of one request, and how often they bit."""

    max_bytes: int
    max_depth: int
    truncated: int = 0
    short_text: int = 0
    """Strings of at most this many characters fit `max_bytes` whatever they contain
    (a character is at most 4 UTF-8 bytes), so the hot path checks only their length."""

    def __post_init__(self) -> None:
        self.short_text = self.max_bytes // 4

    def text(self, value: str) -> str:
        if len(value) <= self.short_text:
            return value
        return self.capped(value, self.max_bytes)

    def capped(self, value: str, max_bytes: int) -> str:
        """`value` cut to `max_bytes` UTF-8 bytes with a marker (and counted), if longer."""
        if len(value) <= max_bytes // 4:
            return value
        encoded = value.encode("utf-8", "surrogatepass")
        if len(encoded) <= max_bytes:
            return value
        # Cutting inside a multi-byte character leaves a partial one; "ignore" drops it.
        kept = encoded[:max_bytes].decode("utf-8", "ignore")
        self.truncated += 1
        dropped = len(encoded) - len(kept.encode("utf-8"))
        return f"{kept}…[truncated {dropped} bytes]"

    def raw(self, value: bytes) -> bytes:
        if len(value) <= self.max_bytes:
            return value
        self.truncated += 1
        dropped = len(value) - self.max_bytes
        return value[: self.max_bytes] + f"…[truncated {dropped} bytes]".encode()


# --- request decoding -------------------------------------------------------------------


def decode_protobuf(
    body: bytes,
    *,
    project_header: str | None = None,
    max_value_bytes: int = MAX_VALUE_BYTES,
    max_value_depth: int = MAX_VALUE_DEPTH,
    max_spans: int | None = None,
    group_by_conversation: bool = False,
) -> DecodedBatch:
    """Decode a binary protobuf `ExportTraceServiceRequest` (caps as in `decode_request`;
    spans counted, and over-full spans cut, on the wire before parsing unless the body is
    small enough to parse whatever it holds: `wire_limits.py`)."""
    bounded = None if len(body) <= SMALL_BODY else bound_request(body, max_spans=max_spans)
    try:
        message, deep = parse_cutting_deep_values(
            ExportTraceServiceRequest.FromString, body if bounded is None else bounded.body
        )
    except ProtobufDecodeError as exc:
        raise DecodeError(
            f"invalid protobuf ExportTraceServiceRequest: {parser_complaint(exc)}"
        ) from None
    except UNDECODABLE as exc:
        raise DecodeError(f"invalid protobuf ExportTraceServiceRequest: {exc!r}") from None
    dropped = (cap_parsed(message) if bounded is None else bounded.dropped) + deep
    del body, bounded  # the parsed message is what decoding needs from here
    batch = decode_request(
        message,
        project_header=project_header,
        max_value_bytes=max_value_bytes,
        max_value_depth=max_value_depth,
        max_spans=max_spans,
        group_by_conversation=group_by_conversation,
    )
    if not dropped:
        return batch
    # Events, links and attributes cut from over-full spans, and values nested too deep
    # for the parser, count with the values cut.
    return replace(batch, truncated_values=batch.truncated_values + dropped)


def decode_json(
    body: bytes,
    *,
    project_header: str | None = None,
    max_value_bytes: int = MAX_VALUE_BYTES,
    max_value_depth: int = MAX_VALUE_DEPTH,
    max_spans: int | None = None,
    group_by_conversation: bool = False,
) -> DecodedBatch:
    """Decode an OTLP/JSON `ExportTraceServiceRequest` (hex ids, camelCase, int64 as strings)."""
    return decode_request(
        parse_request_json(body, max_spans=max_spans),
        project_header=project_header,
        max_value_bytes=max_value_bytes,
        max_value_depth=max_value_depth,
        max_spans=max_spans,
        group_by_conversation=group_by_conversation,
    )


def decode_request(
    msg: ExportTraceServiceRequest,
    *,
    project_header: str | None = None,
    max_value_bytes: int = MAX_VALUE_BYTES,
    max_value_depth: int = MAX_VALUE_DEPTH,
    max_spans: int | None = None,
    group_by_conversation: bool = False,
) -> DecodedBatch:
    """Turn a parsed request (from any transport) into `SpanRecord`s plus rejection counts.

    A request of more than `max_spans` spans raises TooManySpansError before any span is
    converted: half a million tiny spans fit in a 16 MiB body.

    String and bytes attribute values longer than `max_value_bytes` are cut to that size
    and marked `…[truncated N bytes]`, names and keys likewise at `MAX_NAME_BYTES` and
    status messages at `MAX_MESSAGE_BYTES`; arrays and kvlists nested more than
    `max_value_depth` levels deep become `NESTED_TOO_DEEP` from that level down.

    Each span is stamped with its run (`SpanRecord.run_id`, by `faultfinder.reading.runs.
    run_id_of`; `group_by_conversation` is the setting of that name).
    """
    header_project = project_header.strip() if project_header else ""
    spans: list[SpanRecord] = []
    reasons: dict[str, int] = {}
    limits = _ValueLimits(max_value_bytes, max_value_depth)
    try:
        if max_spans is not None:
            count = sum(len(scope.spans) for rs in msg.resource_spans for scope in rs.scope_spans)
            if count > max_spans:
                raise TooManySpansError(count, max_spans)
        for resource_spans in msg.resource_spans:
            resource_attributes = _attributes(resource_spans.resource.attributes, limits)
            project = limits.capped(
                header_project or _resource_project(resource_attributes), MAX_NAME_BYTES
            )
            for scope_spans in resource_spans.scope_spans:
                scope_name = limits.capped(scope_spans.scope.name, MAX_NAME_BYTES)
                for span in scope_spans.spans:
                    problem = _invalid_span(span)
                    if problem is not None:
                        reasons[problem] = reasons.get(problem, 0) + 1
                        continue
                    spans.append(
                        _span_record(
                            span,
                            resource_attributes,
                            scope_name,
                            project,
                            limits,
                            group_by_conversation=group_by_conversation,
                        )
                    )
    except UNDECODABLE as exc:
        raise DecodeError(f"invalid ExportTraceServiceRequest: {exc!r}") from None
    rejected = sum(reasons.values())
    return DecodedBatch(
        spans, rejected, _rejection_message(rejected, reasons), reasons, limits.truncated
    )


def _resource_project(resource_attributes: dict[str, AttributeValue]) -> str:
    """faultfinder's own resource attribute, else OpenInference's (what Phoenix users set)."""
    for key in (c.PROJECT_NAME, c.OI_PROJECT_NAME):
        value = resource_attributes.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return DEFAULT_PROJECT


def _invalid_span(span: Span) -> str | None:
    # Times are fixed64 on the wire but int64 in every database; a later one (past the
    # year 2262) is garbage, and storing it would fail the whole batch it came in.
    for name in ("start_time_unix_nano", "end_time_unix_nano"):
        if getattr(span, name) > _MAX_TIME_NS:
            return f"{name} is beyond the year 2262"
    return _invalid_ids(span)


def _invalid_ids(span: Span) -> str | None:
    if len(span.trace_id) != _TRACE_ID_BYTES:
        return f"trace_id is {len(span.trace_id)} bytes, expected {_TRACE_ID_BYTES}"
    if not any(span.trace_id):
        return "trace_id is all zeros"
    if len(span.span_id) != _SPAN_ID_BYTES:
        return f"span_id is {len(span.span_id)} bytes, expected {_SPAN_ID_BYTES}"
    if not any(span.span_id):
        return "span_id is all zeros"
    if len(span.parent_span_id) not in (0, _SPAN_ID_BYTES):
        return f"parent_span_id is {len(span.parent_span_id)} bytes, expected 0 or {_SPAN_ID_BYTES}"
    return None


def _rejection_message(rejected: int, reasons: dict[str, int]) -> str:
    if not rejected:
        return ""
    quoted = "; ".join(f"{reason} ({n})" for reason, n in list(reasons.items())[:_MAX_REASONS])
    more = "; …" if len(reasons) > _MAX_REASONS else ""
    noun = "span" if rejected == 1 else "spans"
    return f"{rejected} {noun} rejected: {quoted}{more}"


def _span_record(
    span: Span,
    resource_attributes: dict[str, AttributeValue],
    scope_name: str,
    project: str,
    limits: _ValueLimits,
    *,
    group_by_conversation: bool,
) -> SpanRecord:
    # An all-zero parent is how some exporters spell "no parent".
    parent_id = span.parent_span_id
    parent = parent_id.hex() if any(parent_id) else None
    parent_remote = None
    if parent is not None and span.flags & _HAS_IS_REMOTE:
        parent_remote = bool(span.flags & _IS_REMOTE)
    span_status = span.status
    try:
        status = StatusCode(span_status.code)
    except ValueError:  # proto3 enums are open: unknown codes say nothing useful
        status = StatusCode.UNSET
    trace_id = span.trace_id.hex()
    attributes = _attributes(span.attributes, limits)
    limits.truncated += bound_identities(attributes)
    return SpanRecord(
        trace_id=trace_id,
        span_id=span.span_id.hex(),
        parent_span_id=parent,
        name=limits.capped(span.name, MAX_NAME_BYTES),
        start_time_unix_nano=span.start_time_unix_nano,
        end_time_unix_nano=span.end_time_unix_nano,
        kind=int(span.kind),
        parent_remote=parent_remote,
        status_code=status,
        status_message=limits.capped(span_status.message, MAX_MESSAGE_BYTES),
        attributes=attributes,
        events=tuple(
            SpanEvent(
                limits.capped(event.name, MAX_NAME_BYTES),
                event.time_unix_nano,
                _attributes(event.attributes, limits),
            )
            for event in span.events
        )
        if span.events
        else (),
        resource_attributes=resource_attributes,
        scope_name=scope_name,
        project=project,
        run_id=run_id_of(trace_id, attributes, group_by_conversation=group_by_conversation),
    )


def _attributes(pairs: Iterable[KeyValue], limits: _ValueLimits) -> dict[str, AttributeValue]:
    # Duplicate keys are a sender bug; the last one wins, as in the Collector.
    attributes: dict[str, AttributeValue] = {}
    short = limits.short_text
    for pair in pairs:
        key = pair.key
        if len(key) > MAX_NAME_BYTES // 4:
            key = limits.capped(key, MAX_NAME_BYTES)
        value = pair.value
        # Most attribute values are short strings: decoded here without the general
        # walk, which is the largest part of decoding a span.
        if value.WhichOneof("value") == "string_value":
            text = value.string_value
            attributes[key] = text if len(text) <= short else limits.text(text)
        else:
            attributes[key] = _any_value(value, limits, 0)
    return attributes


def _any_value(value: AnyValue, limits: _ValueLimits, depth: int) -> AttributeValue:
    which = value.WhichOneof("value")
    if which == "string_value":
        return limits.text(value.string_value)
    if which == "bool_value":
        return value.bool_value
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        return value.double_value
    if which in ("array_value", "kvlist_value") and depth >= limits.max_depth:
        limits.truncated += 1
        return NESTED_TOO_DEEP
    if which == "array_value":
        return [_any_value(item, limits, depth + 1) for item in value.array_value.values]
    if which == "kvlist_value":
        return {
            limits.capped(pair.key, MAX_NAME_BYTES): _any_value(pair.value, limits, depth + 1)
            for pair in value.kvlist_value.values
        }
    if which == "bytes_value":
        return limits.raw(value.bytes_value)
    return None


# --- replies ----------------------------------------------------------------------------


def encode_response(rejected: int, message: str, *, as_json: bool) -> bytes:
    """An `ExportTraceServiceResponse`, with partial_success only when spans were rejected."""
    response = ExportTraceServiceResponse()
    if rejected > 0:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if as_json:
        text: str = json_format.MessageToJson(response, indent=None)
        return text.encode()
    body: bytes = response.SerializeToString()
    return body


# --- what other OTLP signals' decoders share (log_events.py) ----------------------------

ValueLimits = _ValueLimits


def value_limits(max_bytes: int = MAX_VALUE_BYTES, max_depth: int = MAX_VALUE_DEPTH) -> ValueLimits:
    """The caps on one request's values, counting how often they bit."""
    return _ValueLimits(max_bytes, max_depth)


def attributes_of(pairs: Iterable[KeyValue], limits: ValueLimits) -> dict[str, AttributeValue]:
    """OTLP key-values as attributes, capped as span attributes are."""
    return _attributes(pairs, limits)


def value_of(value: AnyValue, limits: ValueLimits) -> AttributeValue:
    """One OTLP value (a log record's body), capped as attribute values are."""
    return _any_value(value, limits, 0)


def project_of(resource_attributes: dict[str, AttributeValue]) -> str:
    """The project a resource names (faultfinder's attribute, else OpenInference's)."""
    return _resource_project(resource_attributes)
