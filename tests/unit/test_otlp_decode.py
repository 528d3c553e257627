"""OTLP decoding: protobuf and JSON bodies from real SDK spans, compression, garbage, replies."""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.trace import SpanKind, Status
from opentelemetry.trace import StatusCode as SdkStatusCode

from faultfinder import conventions as c
from faultfinder.server.errors import (
    BodyTooLargeError,
    DecodeError,
    RequestError,
    UnsupportedEncodingError,
)
from faultfinder.server.otlp import decode
from faultfinder.server.otlp.decode import (
    DecodedBatch,
    decode_json,
    decode_protobuf,
    decode_request,
    decompress,
    encode_response,
)
from faultfinder.server.otlp.model import StatusCode
from faultfinder.server.otlp.otlp_json import request_to_otlp_json
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


def test_truncated_protobuf_is_a_decode_error() -> None:
    body = protobuf_body(framework_spans())
    for cut in (1, 3, len(body) // 2, len(body) - 5):
        with pytest.raises(DecodeError, match="protobuf"):
            decode_protobuf(body[:-cut])


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"not json", "invalid JSON"),
        (b"\xff\xfe\xfa", "invalid JSON"),
        (b"[]", "top level"),
        (b'{"resourceSpans": 5}', "OTLP/JSON"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 7}]}]}]}', "OTLP/JSON"),
        (b"[" * 100_000, "JSON"),
    ],
)
def test_json_that_is_not_an_otlp_request_is_a_decode_error(body: bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        decode_json(body)


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


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=400))
def test_random_bytes_decode_or_raise_decode_error_only(body: bytes) -> None:
    for decoder in (decode_protobuf, decode_json):
        try:
            batch = decoder(body)
        except DecodeError:
            continue
        assert isinstance(batch, DecodedBatch)


ODD_VALUES: list[object] = [
    None,
    0,
    -1,
    2**70,
    1.5,
    True,
    "",
    "zz",
    "0" * 32,
    [],
    {},
    [1],
    {"a": 1},
]


def _paths(node: object, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    found: list[tuple[object, ...]] = [path]
    if isinstance(node, dict):
        for key, child in node.items():
            found += _paths(child, (*path, key))
    elif isinstance(node, list):
        for position, child in enumerate(node):
            found += _paths(child, (*path, position))
    return found


def test_real_json_with_random_nodes_replaced_decodes_or_raises_decode_error_only() -> None:
    original = json.loads(json_body(framework_spans()))
    paths = [path for path in _paths(original) if path]
    rng = random.Random(11)
    outcomes = {"decoded": 0, "refused": 0}
    for _ in range(400):
        document = json.loads(json.dumps(original))
        for _ in range(rng.randint(1, 3)):
            path = rng.choice(paths)
            node = document
            try:
                for step in path[:-1]:
                    node = node[step]  # type: ignore[index]
                node[path[-1]] = rng.choice(ODD_VALUES)  # type: ignore[index]
            except (KeyError, IndexError, TypeError):
                continue  # an earlier replacement removed this path
        try:
            decode_json(json.dumps(document).encode())
            outcomes["decoded"] += 1
        except DecodeError:
            outcomes["refused"] += 1
    # Both branches are exercised: the mutations are neither all harmless nor all fatal.
    assert outcomes["decoded"] > 0 and outcomes["refused"] > 0


def test_corrupted_real_bodies_decode_or_raise_decode_error_only() -> None:
    body = protobuf_body(framework_spans())
    text = json_body(framework_spans())
    rng = random.Random(7)
    for _ in range(300):
        for original, decoder in ((body, decode_protobuf), (text, decode_json)):
            mutated = bytearray(original)
            for _ in range(rng.randint(1, 4)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            with contextlib.suppress(DecodeError):
                decoder(bytes(mutated))


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def test_nesting_beyond_the_parser_limit_is_a_decode_error() -> None:
    # AnyValue.array_value (5) → ArrayValue.values (1) → AnyValue …, 150 levels deep.
    value = AnyValue(string_value="leaf").SerializeToString()
    document: dict[str, object] = {"stringValue": "leaf"}
    for _ in range(150):
        value = _field(5, _field(1, value))
        document = {"arrayValue": {"values": [document]}}
    attribute = _field(1, b"deep") + _field(2, value)
    span = _field(1, b"\x01" * 16) + _field(2, b"\x02" * 8) + _field(9, attribute)
    body = _field(1, _field(2, _field(2, span)))  # resource_spans → scope_spans → spans
    with pytest.raises(DecodeError, match="protobuf"):
        decode_protobuf(body)

    json_document = json.loads(json_body(framework_spans()))
    json_span = json_document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    json_span["attributes"].append({"key": "deep", "value": document})
    with pytest.raises(DecodeError, match="OTLP/JSON"):
        decode_json(json.dumps(json_document).encode())


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
