"""OTLP decoding: protobuf and JSON bodies from real SDK spans, compression, the JSON
encoding's details, spans rejected one by one, and replies."""

from __future__ import annotations

import base64
import gzip
import json
import zlib

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.trace import SpanKind, Status
from opentelemetry.trace import StatusCode as SdkStatusCode

from faultfinder import conventions as c
from faultfinder.reading.model import StatusCode
from faultfinder.server.errors import (
    BodyTooLargeError,
    DecodeError,
    RequestError,
    UnsupportedEncodingError,
)
from faultfinder.server.otlp import decode
from faultfinder.server.otlp.decode import (
    decode_json,
    decode_protobuf,
    decode_request,
    decompress,
    encode_response,
)
from faultfinder.server.otlp.otlp_json import request_to_otlp_json
from faultfinder.server.otlp.pool import DecodeRequest, decode_body
from tests.otlp_helpers import (
    MS,
    T0,
    SpanRecorder,
    export_request,
    framework_spans,
    json_body,
    protobuf_body,
)

LIMIT = 1 << 20


def varied_spans() -> SpanRecorder:
    """Spans carrying every attribute type the SDK can send, an event and an error status."""
    recorder = SpanRecorder({c.SERVICE_NAME: "svc", "deployment.environment": "test"})
    root = recorder.span(
        "root",
        start=T0,
        end=T0 + 10 * MS,
        attributes={
            "s": "text with ünïcode",
            "b": True,
            "i": -(2**62),
            "f": 0.25,
            "ls": ("a", "b"),
            "li": (1, 2, 3),
            "lb": (True, False),
        },
    )
    child = recorder.tracer.start_span(
        "child",
        context=trace.set_span_in_context(root),
        kind=SpanKind.CLIENT,
        start_time=T0 + MS,
    )
    child.add_event("retry", {"attempt": 2}, timestamp=T0 + 2 * MS)
    child.record_exception(ValueError("bad input"), timestamp=T0 + 3 * MS)
    child.set_status(Status(SdkStatusCode.ERROR, "it broke"))
    child.end(end_time=T0 + 4 * MS)
    return recorder


def test_protobuf_and_json_bodies_of_the_same_spans_decode_to_equal_records() -> None:
    spans = varied_spans().spans
    from_protobuf = decode_protobuf(protobuf_body(spans), project_header=None)
    from_json = decode_json(json_body(spans), project_header=None)

    assert from_protobuf.rejected == from_json.rejected == 0
    assert from_json.spans == from_protobuf.spans
    records = {record.name: record for record in from_protobuf.spans}
    root, child = records["root"], records["child"]
    sdk = {span.name: span for span in spans}
    assert root.trace_id == format(sdk["root"].context.trace_id, "032x")
    assert child.span_id == format(sdk["child"].context.span_id, "016x")
    assert child.parent_span_id == root.span_id and root.parent_span_id is None
    assert root.attributes == {
        "s": "text with ünïcode",
        "b": True,
        "i": -(2**62),
        "f": 0.25,
        "ls": ["a", "b"],
        "li": [1, 2, 3],
        "lb": [True, False],
    }
    assert (root.start_time_unix_nano, root.end_time_unix_nano) == (T0, T0 + 10 * MS)
    assert child.kind == SpanKind.CLIENT.value + 1  # OTLP's enum counts UNSPECIFIED as 0
    assert child.status_code is StatusCode.ERROR and child.status_message == "it broke"
    assert [event.name for event in child.events] == ["retry", "exception"]
    assert child.events[0].attributes == {"attempt": 2}
    assert child.events[1].attributes[c.EXCEPTION_MESSAGE] == "bad input"
    assert root.resource_attributes[c.SERVICE_NAME] == "svc"
    assert root.scope_name == "faultfinder.tests"


def test_project_comes_from_header_then_resource_attribute_then_default() -> None:
    named = SpanRecorder({c.PROJECT_NAME: "checkout", c.SERVICE_NAME: "svc"})
    named.span("a", start=T0, end=T0 + MS)
    unnamed = SpanRecorder({c.SERVICE_NAME: "svc"})
    unnamed.span("b", start=T0, end=T0 + MS)

    assert decode_protobuf(protobuf_body(named.spans), project_header="ops").spans[0].project == (
        "ops"
    )
    assert decode_protobuf(protobuf_body(named.spans), project_header=None).spans[0].project == (
        "checkout"
    )
    anonymous = decode_json(json_body(unnamed.spans), project_header="  ").spans[0]
    assert anonymous.project == "default"
    assert anonymous.resource_attributes[c.SERVICE_NAME] == "svc"


def test_gzip_and_deflate_bodies_decode_like_plain_ones() -> None:
    body = protobuf_body(framework_spans())
    expected = decode_protobuf(body).spans
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    encodings = {
        "gzip": gzip.compress(body),
        "GZip ": gzip.compress(body),
        "x-gzip": gzip.compress(body),
        "deflate": zlib.compress(body),
        "identity": body,
        None: body,
    }
    for encoding, compressed in encodings.items():
        assert decode_protobuf(decompress(compressed, encoding, max_size=LIMIT)).spans == expected
    raw = raw_deflate.compress(body) + raw_deflate.flush()
    assert decompress(raw, "deflate", max_size=LIMIT) == body
    # gzip allows concatenated members; a streaming client may send them.
    half = len(body) // 2
    members = gzip.compress(body[:half]) + gzip.compress(body[half:])
    assert decompress(members, "gzip", max_size=LIMIT) == body


def test_corrupt_truncated_or_unknown_compression_is_a_decode_error() -> None:
    body = gzip.compress(protobuf_body(framework_spans()))
    with pytest.raises(DecodeError, match="truncated gzip"):
        decompress(body[: len(body) // 2], "gzip", max_size=LIMIT)
    with pytest.raises(DecodeError, match="gzip"):
        decompress(b"not gzip at all", "gzip", max_size=LIMIT)
    with pytest.raises(DecodeError, match="deflate"):
        decompress(zlib.compress(b"abc") + b"trailing", "deflate", max_size=LIMIT)
    with pytest.raises(UnsupportedEncodingError, match="'br'"):
        decompress(body, "br", max_size=LIMIT)


def test_a_zip_bomb_stops_at_the_size_limit() -> None:
    bomb = gzip.compress(b"\0" * (50 * LIMIT))
    assert len(bomb) < LIMIT // 10
    with pytest.raises(BodyTooLargeError) as raised:
        decompress(bomb, "gzip", max_size=LIMIT)
    assert not isinstance(raised.value, DecodeError)  # 413, not 400
    assert isinstance(raised.value, RequestError)
    with pytest.raises(BodyTooLargeError):
        decompress(zlib.compress(b"\0" * (LIMIT + 1)), "deflate", max_size=LIMIT)
    with pytest.raises(BodyTooLargeError):
        decompress(b"x" * (LIMIT + 1), None, max_size=LIMIT)
    assert len(decompress(gzip.compress(b"\0" * LIMIT), "gzip", max_size=LIMIT)) == LIMIT


@pytest.mark.parametrize("bad_id", ["xyz", "abc", 12])
def test_json_with_a_bad_hex_id_names_the_field(bad_id: object) -> None:
    document = json.loads(json_body(framework_spans()))
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][2]["spanId"] = bad_id
    with pytest.raises(DecodeError, match=r"spans\[2\]\.spanId"):
        decode_json(json.dumps(document).encode())


def test_json_with_an_empty_parent_id_is_a_root_and_unknown_fields_are_ignored() -> None:
    document = json.loads(json_body(framework_spans()))
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[0]["parentSpanId"] = ""
    spans[0]["someFutureField"] = {"x": 1}
    batch = decode_json(json.dumps(document).encode())
    assert batch.rejected == 0
    assert batch.spans[0].parent_span_id is None


def test_json_int64_values_may_be_strings_or_numbers() -> None:
    recorder = SpanRecorder()
    recorder.span("n", start=T0, end=T0 + MS, attributes={"count": 7})
    document = json.loads(json_body(recorder.spans))
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert isinstance(span["startTimeUnixNano"], str)  # what exporters send
    span["startTimeUnixNano"] = int(span["startTimeUnixNano"])
    span["attributes"][0]["value"] = {"intValue": "7"}
    record = decode_json(json.dumps(document).encode()).spans[0]
    assert record.start_time_unix_nano == T0 and record.attributes == {"count": 7}


def test_individually_invalid_spans_are_rejected_and_the_rest_kept() -> None:
    request = export_request(framework_spans())
    spans = request.resource_spans[0].scope_spans[0].spans
    total = len(spans)
    spans[0].trace_id = b"\x01" * 5
    spans[1].span_id = b""
    spans[2].trace_id = b"\0" * 16
    spans[3].parent_span_id = b"\x02" * 3
    kept_ids = {span.span_id.hex() for span in spans[4:]}

    for batch in (
        decode_request(request, project_header=None),
        decode_protobuf(request.SerializeToString()),
        decode_json(request_to_otlp_json(request)),
    ):
        assert batch.rejected == 4
        assert {record.span_id for record in batch.spans} == kept_ids
        assert len(batch.spans) == total - 4
        assert "4 spans rejected" in batch.error_message
        assert "trace_id is 5 bytes, expected 16" in batch.error_message


def test_response_carries_partial_success_only_when_spans_were_rejected() -> None:
    empty = ExportTraceServiceResponse.FromString(encode_response(0, "", as_json=False))
    assert not empty.HasField("partial_success")
    assert json.loads(encode_response(0, "", as_json=True)) == {}

    partial = ExportTraceServiceResponse.FromString(encode_response(2, "2 bad", as_json=False))
    assert partial.partial_success.rejected_spans == 2
    assert partial.partial_success.error_message == "2 bad"
    # OTLP/JSON spells int64 as a string.
    assert json.loads(encode_response(2, "2 bad", as_json=True)) == {
        "partialSuccess": {"rejectedSpans": "2", "errorMessage": "2 bad"}
    }


def test_decode_error_is_a_value_error_and_the_module_exports_its_errors() -> None:
    assert issubclass(DecodeError, ValueError)
    assert decode.DecodeError is DecodeError and decode.BodyTooLargeError is BodyTooLargeError
    assert set(decode.__all__) >= {
        "DecodedBatch",
        "decode_json",
        "decode_protobuf",
        "decode_request",
        "decompress",
        "encode_response",
    }


def test_base64_ids_sent_as_json_are_refused_rather_than_misread() -> None:
    # A sender using protobuf's plain JSON mapping (base64 ids) must get a clear 400,
    # not spans with garbled ids.
    document = json.loads(json_body(framework_spans()))
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["traceId"] = base64.b64encode(bytes.fromhex(span["traceId"])).decode()
    with pytest.raises(DecodeError, match="traceId"):
        decode_json(json.dumps(document).encode())


def test_a_span_time_beyond_int64_rejects_that_span_only() -> None:
    # fixed64 on the wire, int64 in the database: such a span could never be stored.
    request = export_request(framework_spans())
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].start_time_unix_nano = 2**63
    spans[1].end_time_unix_nano = 2**64 - 1
    spans[2].end_time_unix_nano = 2**63 - 1  # the largest storable time is fine
    for batch in (
        decode_protobuf(request.SerializeToString()),
        decode_json(request_to_otlp_json(request)),
    ):
        assert batch.rejected == 2
        assert len(batch.spans) == len(spans) - 2
        assert "start_time_unix_nano is beyond the year 2262" in batch.error_message
        assert "end_time_unix_nano is beyond the year 2262" in batch.error_message


def test_each_span_is_stamped_with_its_run_as_the_grouping_setting_says() -> None:
    recorder = SpanRecorder()
    recorder.span("tagged", start=T0, end=T0 + MS, attributes={c.RUN_ID: "order-7"})
    recorder.span("turn", start=T0, end=T0 + MS, attributes={c.GEN_AI_CONVERSATION_ID: "chat-1"})
    recorder.span("session", start=T0, end=T0 + MS, attributes={c.OI_SESSION_ID: "chat-2"})
    recorder.span("plain", start=T0, end=T0 + MS)
    body = protobuf_body(recorder.spans)
    by_trace = decode_protobuf(body).spans
    assert [span.run_id for span in by_trace] == [
        "order-7",
        by_trace[1].trace_id,
        by_trace[2].trace_id,
        by_trace[3].trace_id,
    ]
    by_conversation = decode_json(json_body(recorder.spans), group_by_conversation=True).spans
    assert [span.run_id for span in by_conversation] == [
        "order-7",
        "chat-1",
        "chat-2",
        by_conversation[3].trace_id,
    ]
    # The decoder processes stamp the same runs as decoding in place.
    from_pool = decode_body(
        DecodeRequest(body, None, False, None, LIMIT, None, group_by_conversation=True)
    )
    assert from_pool.spans == by_conversation
