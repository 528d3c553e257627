"""OTLP decoding caps what a span may carry: values over a mebibyte are truncated with a
marker, names, keys and messages likewise, values nested too deeply are cut below the cap."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.trace import Status
from opentelemetry.trace import StatusCode as SdkStatusCode

from faultfinder import conventions as c
from faultfinder.server.otlp import decode
from faultfinder.server.otlp.decode import (
    DecodedBatch,
    decode_json,
    decode_protobuf,
)
from faultfinder.server.otlp.otlp_json import request_to_otlp_json
from faultfinder.server.otlp.wire_limits import MAX_EVENTS_PER_SPAN, SMALL_BODY
from tests.otlp_helpers import (
    MS,
    T0,
    SpanRecorder,
    export_request,
    framework_spans,
    json_body,
    protobuf_body,
)

# --- oversized and deeply nested attribute values ----------------------------------------


def _one_span_with(attributes: dict[str, object]) -> SpanRecorder:
    recorder = SpanRecorder({c.SERVICE_NAME: "svc"})
    recorder.span("tool call", start=T0, end=T0 + MS, attributes=attributes)
    return recorder


def _both_encodings(
    recorder: SpanRecorder, max_value_bytes: int = decode.MAX_VALUE_BYTES
) -> list[DecodedBatch]:
    return [
        decode_protobuf(protobuf_body(recorder.spans), max_value_bytes=max_value_bytes),
        decode_json(json_body(recorder.spans), max_value_bytes=max_value_bytes),
    ]


def test_a_value_over_a_mebibyte_is_truncated_with_a_marker_and_the_span_kept() -> None:
    huge = "0123456789" * (decode.MAX_VALUE_BYTES // 10 + 700)  # about 7 kB over 1 MiB
    recorder = _one_span_with({c.GEN_AI_TOOL_CALL_RESULT: huge, c.GEN_AI_TOOL_NAME: "grep"})
    for batch in _both_encodings(recorder):
        assert batch.rejected == 0 and batch.truncated_values == 1
        (span,) = batch.spans
        value = span.attributes[c.GEN_AI_TOOL_CALL_RESULT]
        assert isinstance(value, str)
        dropped = len(huge) - decode.MAX_VALUE_BYTES
        assert value == huge[: decode.MAX_VALUE_BYTES] + f"…[truncated {dropped} bytes]"
        assert span.attributes[c.GEN_AI_TOOL_NAME] == "grep"  # small values are untouched


def test_truncation_counts_utf8_bytes_and_never_splits_a_character() -> None:
    # 'é' is two bytes: a 41-byte cap keeps twenty of them (the 21st would be split).
    # The cap stays above the SDK's own resource values (a 36-character instance id).
    ascii_at_cap = "a" * 41
    recorder = _one_span_with({"text": "é" * 30, "fits": "é" * 20, "ascii": ascii_at_cap})
    for batch in _both_encodings(recorder, max_value_bytes=41):
        attributes = batch.spans[0].attributes
        assert attributes["text"] == "é" * 20 + "…[truncated 20 bytes]"
        assert attributes["fits"] == "é" * 20  # 40 bytes: under the cap
        assert attributes["ascii"] == ascii_at_cap  # exactly the cap: kept whole
        assert batch.truncated_values == 1


def test_caps_apply_to_resource_event_and_array_values_too() -> None:
    recorder = SpanRecorder({c.SERVICE_NAME: "svc", "host.description": "r" * 70})
    span = recorder.tracer.start_span("step", start_time=T0, attributes={"list": ("x" * 70, "ok")})
    span.add_event("log", {"message": "m" * 70}, timestamp=T0 + 1)
    span.end(end_time=T0 + MS)
    for batch in _both_encodings(recorder, max_value_bytes=40):
        (record,) = batch.spans
        marker = "…[truncated 30 bytes]"
        assert record.resource_attributes["host.description"] == "r" * 40 + marker
        assert record.attributes["list"] == ["x" * 40 + marker, "ok"]
        assert record.events[0].attributes["message"] == "m" * 40 + marker
        assert batch.truncated_values == 3


def test_names_keys_and_status_messages_are_capped_like_values() -> None:
    long_name = "n" * (decode.MAX_NAME_BYTES + 100)
    long_message = "s" * (decode.MAX_MESSAGE_BYTES + 50)
    recorder = SpanRecorder({c.SERVICE_NAME: "svc", "k" * (decode.MAX_NAME_BYTES + 1): "v"})
    span = recorder.tracer.start_span(long_name, start_time=T0, attributes={long_name: "value"})
    span.add_event(long_name, {"message": "short"}, timestamp=T0 + 1)
    span.set_status(Status(SdkStatusCode.ERROR, long_message))
    span.end(end_time=T0 + MS)
    for batch in _both_encodings(recorder):
        (record,) = batch.spans
        capped = "n" * decode.MAX_NAME_BYTES + "…[truncated 100 bytes]"
        assert record.name == capped
        assert record.events[0].name == capped
        assert record.attributes == {capped: "value"}
        assert record.status_message == "s" * decode.MAX_MESSAGE_BYTES + "…[truncated 50 bytes]"
        assert "k" * decode.MAX_NAME_BYTES + "…[truncated 1 bytes]" in record.resource_attributes
        assert batch.truncated_values == 5
        assert record.resource_attributes[c.SERVICE_NAME] == "svc"  # short ones untouched


def _nested(levels: int) -> AnyValue:
    # Mostly arrays: each kvlist level costs the protobuf parser one more nested message,
    # and it refuses bodies nested ~100 messages deep whatever we do afterwards.
    value = AnyValue(string_value="leaf")
    for level in range(levels):
        outer = AnyValue()
        if level % 8 == 1:
            outer.kvlist_value.values.add(key=f"k{level}").value.CopyFrom(value)
        else:
            outer.array_value.values.append(value)
        value = outer
    return value


def _depth(value: object) -> int:
    """Container levels above the innermost non-container value."""
    if isinstance(value, list):
        return 1 + _depth(value[0])
    if isinstance(value, dict):
        return 1 + _depth(next(iter(value.values())))
    return 0


def _innermost(value: object) -> object:
    while isinstance(value, list | dict):
        value = value[0] if isinstance(value, list) else next(iter(value.values()))
    return value


def test_values_nested_deeper_than_the_cap_are_replaced_below_it() -> None:
    request = export_request(framework_spans())
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.attributes.add(key="deep").value.CopyFrom(_nested(40))
    span.attributes.add(key="shallow").value.CopyFrom(_nested(decode.MAX_VALUE_DEPTH))
    for batch in (
        decode_protobuf(request.SerializeToString()),
        decode_json(request_to_otlp_json(request)),
    ):
        assert batch.rejected == 0 and batch.truncated_values == 1
        record = next(r for r in batch.spans if "deep" in r.attributes)
        deep, shallow = record.attributes["deep"], record.attributes["shallow"]
        assert _depth(deep) == decode.MAX_VALUE_DEPTH
        assert _innermost(deep) == decode.NESTED_TOO_DEEP
        assert _depth(shallow) == decode.MAX_VALUE_DEPTH and _innermost(shallow) == "leaf"


def test_an_oversized_bytes_value_is_truncated_with_a_marker() -> None:
    request = export_request(framework_spans())
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.attributes.add(key="blob").value.bytes_value = bytes(range(256)) * 4
    batch = decode_protobuf(request.SerializeToString(), max_value_bytes=100)
    record = next(r for r in batch.spans if "blob" in r.attributes)
    assert record.attributes["blob"] == bytes(range(100)) + "…[truncated 924 bytes]".encode()


# --- over-full spans: cut on the wire (large bodies) or once parsed (small ones) ------------


def _over_full_request(events: int, padding: int) -> bytes:
    """One span of `events` events (it already says 7 were dropped at the source), padded
    with an attribute of `padding` bytes to put the body on either side of `SMALL_BODY`."""
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x02" * 16, b"\x03" * 8, "agent turn"
    span.dropped_events_count = 7
    span.attributes.add(key="padding").value.string_value = "x" * padding
    for n in range(events):
        span.events.add(name=f"event {n}", time_unix_nano=T0 + n)
    body: bytes = request.SerializeToString()
    return body


def test_small_and_large_bodies_cut_an_over_full_span_alike() -> None:
    small = _over_full_request(MAX_EVENTS_PER_SPAN + 300, padding=10)
    large = _over_full_request(MAX_EVENTS_PER_SPAN + 300, padding=SMALL_BODY)
    assert len(small) <= SMALL_BODY < len(large)
    batches = [decode_protobuf(body) for body in (small, large)]
    for batch in batches:
        (span,) = batch.spans
        assert [event.name for event in span.events[-2:]] == ["event 998", "event 999"]
        assert len(span.events) == MAX_EVENTS_PER_SPAN
        assert batch.truncated_values == 300
