"""OTLP log requests → the GenAI events they carry, as spans the assembler folds in.

OpenTelemetry's own GenAI instrumentations (`opentelemetry-instrumentation-openai-v2`
and its siblings) and Semantic Kernel record a model call's messages as log records,
one per message (`gen_ai.user.message`, `gen_ai.choice`, …), each naming the span it
belongs to, rather than on the span. `POST /v1/logs` reads them so that such a call is
not a blank step.

The log records of one span in one request become one *carrier* span: a child of that
span holding the records as its events (`faultfinder/reading/events.py` reads them as
messages), marked `faultfinder.log_events`, lasting no time and opening no run of its
own. The assembler puts a carrier's events on its span and drops the carrier
(`faultfinder/reading/assembler.py`, `_log_events_on_their_spans`). A carrier's id is
derived from what it carries, so a request sent again is stored once. Records that name
no span, or whose event is not a GenAI one (a service's other logs), are not kept.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from faultfinder import conventions as c
from faultfinder.reading.model import AttributeValue, SpanEvent, SpanRecord
from faultfinder.server.errors import DecodeError, TooManySpansError
from faultfinder.server.otlp.decode import (
    MAX_NAME_BYTES,
    DecodedBatch,
    ValueLimits,
    attributes_of,
    project_of,
    value_limits,
    value_of,
)
from faultfinder.server.otlp.deep_values import parse_cutting_deep_values
from faultfinder.server.otlp.otlp_json import UNDECODABLE, parse_logs_request_json
from faultfinder.server.otlp.wire_limits import count_log_records

__all__ = ["decode_logs_json", "decode_logs_protobuf", "decode_logs_request"]

_GENAI_EVENT_PREFIX = "gen_ai."
_EVENT_NAME_ATTRIBUTE = "event.name"
"""Where log records name their event before OTLP's `event_name` field (Semantic Kernel,
older OpenTelemetry SDKs)."""


def decode_logs_protobuf(
    body: bytes, *, project_header: str | None = None, max_records: int | None = None
) -> DecodedBatch:
    """Decode a binary protobuf `ExportLogsServiceRequest` into carrier spans (its records
    counted on the wire first: `wire_limits.count_log_records`)."""
    count_log_records(body, max_records=max_records)
    try:
        message, deep = parse_cutting_deep_values(
            ExportLogsServiceRequest.FromString, body, logs=True
        )
    except ProtobufDecodeError as exc:
        raise DecodeError(f"invalid protobuf ExportLogsServiceRequest: {exc}") from None
    except UNDECODABLE as exc:
        raise DecodeError(f"invalid protobuf ExportLogsServiceRequest: {exc!r}") from None
    batch = decode_logs_request(message, project_header=project_header, max_records=max_records)
    return replace(batch, truncated_values=batch.truncated_values + deep) if deep else batch


def decode_logs_json(
    body: bytes, *, project_header: str | None = None, max_records: int | None = None
) -> DecodedBatch:
    """Decode an OTLP/JSON `ExportLogsServiceRequest` (hex ids, camelCase)."""
    message = parse_logs_request_json(body)
    return decode_logs_request(message, project_header=project_header, max_records=max_records)


def decode_logs_request(
    msg: ExportLogsServiceRequest,
    *,
    project_header: str | None = None,
    max_records: int | None = None,
) -> DecodedBatch:
    """The carrier spans of a parsed request: one per span its GenAI records name."""
    header_project = project_header.strip() if project_header else ""
    limits = value_limits()
    spans: list[SpanRecord] = []
    try:
        if max_records is not None:
            count = sum(
                len(scope.log_records) for rl in msg.resource_logs for scope in rl.scope_logs
            )
            if count > max_records:
                raise TooManySpansError(count, max_records)
        for resource_logs in msg.resource_logs:
            resource_attributes = attributes_of(resource_logs.resource.attributes, limits)
            project = limits.capped(
                header_project or project_of(resource_attributes), MAX_NAME_BYTES
            )
            for scope_logs in resource_logs.scope_logs:
                scope_name = limits.capped(scope_logs.scope.name, MAX_NAME_BYTES)
                by_span: dict[tuple[bytes, bytes], list[SpanEvent]] = {}
                for record in scope_logs.log_records:
                    if len(record.trace_id) != 16 or len(record.span_id) != 8:
                        continue
                    if not any(record.trace_id) or not any(record.span_id):
                        continue
                    event = _event(record, limits)
                    if event is not None:
                        by_span.setdefault((record.trace_id, record.span_id), []).append(event)
                spans.extend(
                    _carrier(trace_id, span_id, events, resource_attributes, scope_name, project)
                    for (trace_id, span_id), events in by_span.items()
                )
    except UNDECODABLE as exc:
        raise DecodeError(f"invalid ExportLogsServiceRequest: {exc!r}") from None
    return DecodedBatch(spans, truncated_values=limits.truncated)


def _event(record: LogRecord, limits: ValueLimits) -> SpanEvent | None:
    """One log record as the span event it stands for; None for a record that is no
    GenAI event."""
    attributes = attributes_of(record.attributes, limits)
    name = record.event_name or attributes.pop(_EVENT_NAME_ATTRIBUTE, None)
    if not isinstance(name, str) or not name.startswith(_GENAI_EVENT_PREFIX):
        return None
    attributes.pop(_EVENT_NAME_ATTRIBUTE, None)
    if record.HasField("body"):
        _add_body(attributes, value_of(record.body, limits))
    time = record.time_unix_nano or record.observed_time_unix_nano
    # Times are fixed64 on the wire but int64 in every database (as for spans).
    return SpanEvent(limits.capped(name, MAX_NAME_BYTES), time if time < 2**63 else 0, attributes)


def _add_body(attributes: dict[str, AttributeValue], body: AttributeValue) -> None:
    """A record's body joins its attributes: a map's fields (`content`, `message`,
    `tool_calls`, `id`), or a JSON object's written as text (Semantic Kernel's), or else
    the body as the message's `content`."""
    fields = body
    if isinstance(body, str) and body.lstrip().startswith("{"):
        try:
            fields = json.loads(body)
        except (ValueError, RecursionError):
            fields = body
    if isinstance(fields, dict):
        for key, value in fields.items():
            attributes.setdefault(str(key), value)
    elif body is not None:
        attributes.setdefault("content", body)


def _carrier(
    trace_id: bytes,
    span_id: bytes,
    events: list[SpanEvent],
    resource_attributes: dict[str, AttributeValue],
    scope_name: str,
    project: str,
) -> SpanRecord:
    digest = hashlib.blake2b(trace_id + span_id, digest_size=8)
    for event in events:
        digest.update(event.name.encode())
        digest.update(event.time_unix_nano.to_bytes(8, "little", signed=False))
        digest.update(json.dumps(event.attributes, sort_keys=True, default=str).encode())
    carrier_id = digest.digest()
    if not any(carrier_id):
        carrier_id = b"\x00" * 7 + b"\x01"
    at = min((event.time_unix_nano for event in events), default=0)
    return SpanRecord(
        trace_id=trace_id.hex(),
        span_id=carrier_id.hex(),
        parent_span_id=span_id.hex(),
        name=c.LOG_EVENTS_SPAN,
        start_time_unix_nano=at,
        end_time_unix_nano=at,
        attributes={c.LOG_EVENTS_SPAN: True},
        events=tuple(events),
        resource_attributes=resource_attributes,
        scope_name=scope_name,
        project=project,
        # A log record names its span by trace and span id only, none of the attributes
        # that key a run otherwise: its carrier is its trace's, whatever the grouping (the
        # store finds it there: `faultfinder/server/store/spans.py`).
        run_id=trace_id.hex(),
    )
