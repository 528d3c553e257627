"""Bounds on what one OTLP trace request may hold, applied to its wire format before it is
parsed.

Parsing is where a hostile body costs: each protobuf message takes about a hundred bytes
once parsed, and an empty span or event is two bytes on the wire, so 16 MiB of empty
spans parse into gigabytes, and one span of millions of empty events likewise. This pass
walks the request's bytes down to its spans without building anything: it counts the
spans (refusing the request, `TooManySpansError`, as soon as there are too many, before
the parser sees it) and, in each span, its attributes, events and links. A span of more
than `MAX_EVENTS_PER_SPAN` events (links: `MAX_LINKS_PER_SPAN`, attributes:
`MAX_ATTRIBUTES_PER_SPAN`) keeps the first ones and is rewritten with the others counted
in its `dropped_*_count`, as the OpenTelemetry SDKs do at the source. The fields looked at
are counted too: a request holding more than `MAX_FIELDS_PER_REQUEST` of them is refused
whole, so the pass itself stays within about a second of CPU whatever the body.

A body of at most `SMALL_BODY` bytes skips the pass: whatever it holds parses into a few
tens of MB at most, so it is parsed directly and its over-full spans are cut once parsed
(`cap_parsed`, with the same caps and counts); its spans are counted after parsing too
(`decode_request`). Exporters' usual batches are this small, and the pass, pure Python,
would cost them about a third of their decoding time.

Nested values (attribute arrays and kvlists, the attributes of events) are not walked;
they are bounded by the body size limits and, in depth, by protobuf's parser, which
refuses messages nested more than 100 deep; a request it refuses for that is rewritten
with its deep values cut and parsed again (`deep_values.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from faultfinder.server.errors import DecodeError, TooManySpansError

__all__ = [
    "MAX_ATTRIBUTES_PER_SPAN",
    "MAX_EVENTS_PER_SPAN",
    "MAX_FIELDS_PER_REQUEST",
    "MAX_LINKS_PER_SPAN",
    "SMALL_BODY",
    "Bounded",
    "bound_request",
    "cap_parsed",
    "count_log_records",
    "parser_complaint",
]

MAX_EVENTS_PER_SPAN = 1000
"""Events one span keeps (the first ones); the rest are counted in `dropped_events_count`."""
MAX_LINKS_PER_SPAN = 1000
"""Links one span keeps; the rest are counted in `dropped_links_count`."""
MAX_ATTRIBUTES_PER_SPAN = 10_000
"""Attributes one span keeps; the rest are counted in `dropped_attributes_count`.
Generous: OpenInference flattens a conversation into several attributes per message."""
MAX_FIELDS_PER_REQUEST = 2_000_000
"""Fields of spans (attributes, events, links and the rest) one request may hold: about a
second of this pass's CPU, and a few hundred MB once parsed."""
SMALL_BODY = 512 * 1024
"""Bodies up to this size are parsed without the pass: an empty message is two bytes on
the wire and about 170 once parsed, so at most some 45 MB, and at most 256k fields
(far under `MAX_FIELDS_PER_REQUEST`)."""

# Field numbers: ExportTraceServiceRequest.resource_spans, ResourceSpans.scope_spans,
# ScopeSpans.spans, and Span's repeated fields with their dropped counts.
_RESOURCE_SPANS = 1
_SCOPE_SPANS = 2
_SPANS = 2
_CAPPED = {9: 10, 11: 12, 13: 14}
"""Span's attributes, events and links → the field counting the ones dropped."""
_LEN = 2


@dataclass(slots=True)
class Bounded:
    """What the pass found: the request (rewritten if a span was cut), its spans, and
    the events, links and attributes dropped from over-full spans."""

    body: bytes
    spans: int = 0
    dropped: int = 0
    fields: int = 0


def bound_request(
    body: bytes,
    *,
    max_spans: int | None,
    max_fields: int = MAX_FIELDS_PER_REQUEST,
    caps: dict[int, int] | None = None,
) -> Bounded:
    """Check and cut `body`, an `ExportTraceServiceRequest` (see the module's docstring).

    Raises `TooManySpansError` for too many spans or fields, `DecodeError` for bytes that
    are not a protobuf message; returns the body unchanged when nothing was cut.
    """
    limits = caps or {9: MAX_ATTRIBUTES_PER_SPAN, 11: MAX_EVENTS_PER_SPAN, 13: MAX_LINKS_PER_SPAN}
    scan = _Scan(body, max_spans, max_fields, limits)
    try:
        rewritten = scan.message(0, len(body), _RESOURCE_SPANS, scan.resource_spans)
    except IndexError:
        raise DecodeError("invalid protobuf ExportTraceServiceRequest: truncated") from None
    if max_spans is not None and scan.spans > max_spans:
        raise TooManySpansError(scan.spans, max_spans)
    return Bounded(body if rewritten is None else rewritten, scan.spans, scan.dropped, scan.fields)


def cap_parsed(request: ExportTraceServiceRequest) -> int:
    """Cut a parsed request's over-full spans as `bound_request` cuts them on the wire (the
    first ones kept, the others added to the span's dropped counts); how many were cut."""
    dropped = 0
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if len(span.attributes) > MAX_ATTRIBUTES_PER_SPAN:
                    cut = len(span.attributes) - MAX_ATTRIBUTES_PER_SPAN
                    del span.attributes[MAX_ATTRIBUTES_PER_SPAN:]
                    span.dropped_attributes_count += cut
                    dropped += cut
                if len(span.events) > MAX_EVENTS_PER_SPAN:
                    cut = len(span.events) - MAX_EVENTS_PER_SPAN
                    del span.events[MAX_EVENTS_PER_SPAN:]
                    span.dropped_events_count += cut
                    dropped += cut
                if len(span.links) > MAX_LINKS_PER_SPAN:
                    cut = len(span.links) - MAX_LINKS_PER_SPAN
                    del span.links[MAX_LINKS_PER_SPAN:]
                    span.dropped_links_count += cut
                    dropped += cut
    return dropped


def count_log_records(
    body: bytes, *, max_records: int | None, max_fields: int = MAX_FIELDS_PER_REQUEST
) -> int:
    """The log records of `body`, an `ExportLogsServiceRequest`, counted on the wire as
    spans are (`bound_request`: `TooManySpansError` past `max_records` records or
    `max_fields` fields of records; nothing is cut)."""
    scan = _Scan(body, max_records, max_fields, {}, noun="log records")
    # ResourceLogs.scope_logs and ScopeLogs.log_records are field 2, like their spans'.
    try:
        scan.message(0, len(body), _RESOURCE_SPANS, scan.resource_spans)
    except IndexError:
        raise DecodeError("invalid protobuf ExportLogsServiceRequest: truncated") from None
    if max_records is not None and scan.spans > max_records:
        raise TooManySpansError(scan.spans, max_records, counted="log records")
    return scan.spans


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    result, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = data[pos]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos + 1
        shift += 7
        if shift > 63:
            raise DecodeError("invalid protobuf ExportTraceServiceRequest: varint too long")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _skip(data: bytes, pos: int, wire_type: int, end: int) -> int:
    """The position after a field's value starting at `pos`."""
    if wire_type == 0:
        return _varint(data, pos)[1]
    if wire_type == 1:
        after = pos + 8
    elif wire_type == _LEN:
        length, pos = _varint(data, pos)
        after = pos + length
    elif wire_type == 5:
        after = pos + 4
    else:
        raise DecodeError(f"invalid protobuf ExportTraceServiceRequest: wire type {wire_type}")
    if after > end:
        raise DecodeError("invalid protobuf ExportTraceServiceRequest: truncated field")
    return after


_Child = Callable[[int, int], "bytes | None"]
"""Walks one child message (`data[start:end]`); its rewritten bytes, or None if unchanged."""

_COUNT_ONLY = 10
"""Past `max_spans`, spans are only counted (for the refusal to say how many), up to this
many times `max_spans`; beyond, the refusal says "or more"."""


class _Scan:
    def __init__(
        self,
        data: bytes,
        max_spans: int | None,
        max_fields: int,
        caps: dict[int, int],
        noun: str = "spans",
    ) -> None:
        self.data = data
        self.noun = noun
        self.max_spans = max_spans
        self.max_fields = max_fields
        self.caps = caps
        self.spans = 0
        self.fields = 0
        self.dropped = 0

    def message(self, start: int, end: int, field: int, child: _Child) -> bytes | None:
        """Walk the message in `data[start:end]`, handing each `field` (a message) to
        `child`; the message rebuilt if a child was, else None."""
        data = self.data
        pieces: list[bytes] | None = None
        kept_from = start
        pos = start
        while pos < end:
            tag_at = pos
            tag, pos = _varint(data, pos)
            if tag >> 3 != field or tag & 7 != _LEN:
                pos = _skip(data, pos, tag & 7, end)
                continue
            length, pos = _varint(data, pos)
            after = pos + length
            if after > end:
                raise DecodeError("invalid protobuf ExportTraceServiceRequest: truncated field")
            rewritten = child(pos, after)
            if rewritten is not None:
                pieces = [] if pieces is None else pieces
                pieces.append(data[kept_from:tag_at])
                pieces += (_encode_varint(tag), _encode_varint(len(rewritten)), rewritten)
                kept_from = after
            pos = after
        if pieces is None:
            return None
        pieces.append(data[kept_from:end])
        return b"".join(pieces)

    def resource_spans(self, start: int, end: int) -> bytes | None:
        return self.message(start, end, _SCOPE_SPANS, self.scope_spans)

    def scope_spans(self, start: int, end: int) -> bytes | None:
        return self.message(start, end, _SPANS, self.span)

    def span(self, start: int, end: int) -> bytes | None:
        self.spans += 1
        if self.max_spans is not None and self.spans > self.max_spans:
            if self.spans > _COUNT_ONLY * self.max_spans:
                raise TooManySpansError(self.spans, self.max_spans, counted=f"or more {self.noun}")
            return None  # refused once counted (`bound_request`): no need to look inside
        counts = self._count_fields(start, end)
        if all(counts.get(field, 0) <= cap for field, cap in self.caps.items()):
            return None
        return self._cut(start, end, counts)

    def _count_fields(self, start: int, end: int) -> dict[int, int]:
        data = self.data
        counts: dict[int, int] = {}
        pos = start
        fields = self.fields
        while pos < end:
            tag = data[pos]
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = _varint(data, pos)
            number = tag >> 3
            counts[number] = counts.get(number, 0) + 1
            if tag & 7 == _LEN and data[pos] < 0x80:  # the usual case, inlined
                pos += 1 + data[pos]
                if pos > end:
                    raise DecodeError("invalid protobuf ExportTraceServiceRequest: truncated field")
            else:
                pos = _skip(data, pos, tag & 7, end)
            fields += 1
            if fields > self.max_fields:
                raise TooManySpansError(
                    fields, self.max_fields, counted="or more span fields (attributes, events…)"
                )
        self.fields = fields
        return counts

    def _cut(self, start: int, end: int, counts: dict[int, int]) -> bytes:
        """The span with only the first `caps[field]` of each capped field, the others
        added to its dropped counts."""
        data = self.data
        seen: dict[int, int] = {}
        dropped_before: dict[int, int] = {}
        out: list[bytes] = []
        pos = start
        while pos < end:
            tag_at = pos
            tag, pos = _varint(data, pos)
            number = tag >> 3
            if number in _CAPPED.values() and tag & 7 == 0:
                dropped_before[number], pos = _varint(data, pos)
                continue
            pos = _skip(data, pos, tag & 7, end)
            cap = self.caps.get(number)
            if cap is not None:
                seen[number] = seen.get(number, 0) + 1
                if seen[number] > cap:
                    continue
            out.append(data[tag_at:pos])
        for field, dropped_field in _CAPPED.items():
            dropped = max(0, counts.get(field, 0) - self.caps.get(field, counts.get(field, 0)))
            self.dropped += dropped
            total = dropped + dropped_before.get(dropped_field, 0)
            if total:
                out.append(_encode_varint(dropped_field << 3) + _encode_varint(total))
        return b"".join(out)


def parser_complaint(error: Exception) -> str:
    """What protobuf's parser said of a body, with what its depth limit means for OTLP."""
    if "MaxDepth" not in str(error):
        return str(error)
    return (
        f"{error}: an attribute value is nested 32 or more levels deep (protobuf's parser"
        " takes at most 100 nested messages, and each array or kvlist level is three)"
    )
