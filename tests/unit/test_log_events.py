"""GenAI events sent as OTLP log records (OpenTelemetry's own GenAI instrumentations,
Semantic Kernel): real log records from the OpenTelemetry SDK, encoded as its OTLP
exporter encodes them, decoded into carrier spans and assembled onto the spans they
name."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from faultfinder import conventions as c
from faultfinder.attributors.model import StepKind
from faultfinder.reading.assembler import assemble_trajectory
from faultfinder.reading.model import SpanRecord
from faultfinder.reading.runs import run_facts
from faultfinder.server.errors import DecodeError
from faultfinder.server.otlp.log_events import decode_logs_json, decode_logs_protobuf
from tests.otlp_helpers import MS, T0, SpanRecorder, span_records

CENSUS = "Lyon: 522,250 inhabitants (2021 census)."


def _logged(
    span_context: trace.SpanContext,
    records: Sequence[tuple[str, Any]],
    *,
    in_attribute: bool = False,
) -> Sequence[ReadableLogRecord]:
    """`records` (event name, body) emitted by the SDK within `span_context`; with
    `in_attribute`, the event named by the `event.name` attribute (Semantic Kernel)."""
    exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    provider = LoggerProvider(resource=Resource.create({"service.name": "shop"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("genai")
    context = trace.set_span_in_context(trace.NonRecordingSpan(span_context))
    for name, body in records:
        if in_attribute:
            logger.emit(LogRecord(body=body, attributes={"event.name": name}, context=context))
        else:
            logger.emit(LogRecord(event_name=name, body=body, context=context))
    provider.shutdown()
    return exporter.get_finished_logs()


def _protobuf(logs: Sequence[ReadableLogRecord]) -> bytes:
    body: bytes = encode_logs(logs).SerializeToString()
    return body


def _chat_run(
    records: Sequence[tuple[str, Any]], **kwargs: Any
) -> tuple[list[SpanRecord], list[SpanRecord]]:
    """A model call's span (attributes only, as openai-v2 records it) and the carriers of
    `records` logged within it."""
    recorder = SpanRecorder()
    span = recorder.tracer.start_span(
        "chat gpt-4o", start_time=T0, attributes={c.GEN_AI_OPERATION_NAME: c.OP_CHAT}
    )
    span.end(end_time=T0 + MS)
    spans = span_records(recorder.spans)
    carriers = decode_logs_protobuf(
        _protobuf(_logged(span.get_span_context(), records, **kwargs))
    ).spans
    return spans, carriers


OPENAI_V2_CALL: list[tuple[str, Any]] = [
    ("gen_ai.system.message", {"content": "You look figures up."}),
    ("gen_ai.user.message", {"content": "How many people live in Lyon?"}),
    (
        "gen_ai.choice",
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "census_lookup", "arguments": '{"city": "Lyon"}'},
                    }
                ],
            },
        },
    ),
]


def test_openai_v2_log_events_give_the_model_call_its_messages() -> None:
    spans, carriers = _chat_run(OPENAI_V2_CALL)
    (carrier,) = carriers
    assert carrier.parent_span_id == spans[0].span_id and carrier.trace_id == spans[0].trace_id
    assert [event.name for event in carrier.events] == [name for name, _ in OPENAI_V2_CALL]
    # A carrier opens no run of its own: the run is its span's.
    assert not run_facts(carrier).opens_run
    trajectory = assemble_trajectory("r", [*spans, *carriers])
    (step,) = trajectory.steps
    assert step.kind is StepKind.LLM
    assert step.content == 'census_lookup({"city": "Lyon"})'
    assert trajectory.task == "How many people live in Lyon?"


def test_a_request_sent_twice_gives_the_same_carrier_and_the_run_is_unchanged() -> None:
    spans, carriers = _chat_run(OPENAI_V2_CALL)
    # The same request (same span, same records) decodes to the same id.
    body = _protobuf(_logged(_context_of(spans[0]), OPENAI_V2_CALL))
    assert (
        decode_logs_protobuf(body).spans[0].span_id == decode_logs_protobuf(body).spans[0].span_id
    )
    once = assemble_trajectory("r", [*spans, *carriers])
    twice = assemble_trajectory("r", [*spans, *carriers, *carriers])
    assert once.steps == twice.steps


def _context_of(span: SpanRecord) -> trace.SpanContext:
    return trace.SpanContext(
        int(span.trace_id, 16),
        int(span.span_id, 16),
        is_remote=False,
        trace_flags=trace.TraceFlags(1),
    )


def test_semantic_kernels_records_name_their_event_in_an_attribute_with_json_bodies() -> None:
    records = [
        (
            "gen_ai.user.message",
            json.dumps({"role": "user", "content": "How many people live in Lyon?"}),
        ),
        (
            "gen_ai.choice",
            json.dumps(
                {
                    "message": {"role": "assistant", "content": "About 522,250."},
                    "finish_reason": "stop",
                }
            ),
        ),
    ]
    spans, carriers = _chat_run(records, in_attribute=True)
    trajectory = assemble_trajectory("r", [*spans, *carriers])
    assert [step.content for step in trajectory.steps] == ["About 522,250."]
    assert trajectory.task == "How many people live in Lyon?"


def test_a_tool_report_logged_in_the_next_call_answers_its_call() -> None:
    """openai-v2 records no tool span: the call is read from the next call's input."""
    answer = [
        *OPENAI_V2_CALL[:2],
        ("gen_ai.assistant.message", {"tool_calls": OPENAI_V2_CALL[2][1]["message"]["tool_calls"]}),
        ("gen_ai.tool.message", {"content": CENSUS, "id": "call_1"}),
        (
            "gen_ai.choice",
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Lyon has 225,520 inhabitants."},
            },
        ),
    ]
    recorder = SpanRecorder()
    calls = []
    for at in (0, 2):
        span = recorder.tracer.start_span(
            "chat gpt-4o", start_time=T0 + at * MS, attributes={c.GEN_AI_OPERATION_NAME: c.OP_CHAT}
        )
        span.end(end_time=T0 + (at + 1) * MS)
        calls.append(span)
    logged = [
        *_logged(calls[0].get_span_context(), OPENAI_V2_CALL),
        *_logged(calls[1].get_span_context(), answer),
    ]
    carriers = decode_logs_protobuf(_protobuf(logged)).spans
    trajectory = assemble_trajectory("r", [*span_records(recorder.spans), *carriers])
    assert [(s.kind, s.tool_name, s.content) for s in trajectory.steps] == [
        (StepKind.LLM, None, 'census_lookup({"city": "Lyon"})'),
        (StepKind.TOOL, "census_lookup", CENSUS),
        (StepKind.LLM, None, "Lyon has 225,520 inhabitants."),
    ]


def test_records_naming_no_span_and_other_logs_are_left_out() -> None:
    recorder = SpanRecorder()
    span = recorder.tracer.start_span("chat", start_time=T0)
    span.end(end_time=T0 + MS)
    service_log = _logged(span.get_span_context(), [("checkout.completed", "order 7 paid")])
    exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    provider.get_logger("x").emit(
        LogRecord(event_name="gen_ai.user.message", body={"content": "hi"})
    )
    provider.shutdown()
    body = _protobuf([*service_log, *exporter.get_finished_logs()])
    assert decode_logs_protobuf(body).spans == []


def test_carriers_without_their_span_add_no_step() -> None:
    _, carriers = _chat_run(OPENAI_V2_CALL)
    other = SpanRecorder()
    root = other.tracer.start_span(
        "invoke_agent",
        start_time=T0,
        attributes={c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: "a"},
    )
    root.end(end_time=T0 + MS)
    alone = assemble_trajectory("r", [*span_records(other.spans), *carriers])
    assert all(step.content != 'census_lookup({"city": "Lyon"})' for step in alone.steps)


def test_otlp_json_logs_decode_like_protobuf() -> None:
    spans, _ = _chat_run(OPENAI_V2_CALL)
    span = spans[0]
    document: Mapping[str, Any] = {
        "resourceLogs": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "shop"}}]
                },
                "scopeLogs": [
                    {
                        "scope": {"name": "genai"},
                        "logRecords": [
                            {
                                "timeUnixNano": str(T0),
                                "eventName": "gen_ai.user.message",
                                "traceId": span.trace_id,
                                "spanId": span.span_id,
                                "body": {
                                    "kvlistValue": {
                                        "values": [
                                            {
                                                "key": "content",
                                                "value": {
                                                    "stringValue": "How many people live in Lyon?"
                                                },
                                            }
                                        ]
                                    }
                                },
                            }
                        ],
                    }
                ],
            }
        ]
    }
    (carrier,) = decode_logs_json(json.dumps(document).encode()).spans
    assert carrier.parent_span_id == span.span_id
    assert carrier.events[0].attributes == {"content": "How many people live in Lyon?"}


@pytest.mark.parametrize("body", [b"\x0a\xff\xff", b"not json", b"[1, 2]", b'{"resourceLogs": 3}'])
def test_undecodable_log_requests_raise_a_decode_error(body: bytes) -> None:
    with pytest.raises(DecodeError):
        if body.startswith((b"{", b"[", b"n")):
            decode_logs_json(body)
        else:
            decode_logs_protobuf(body)
