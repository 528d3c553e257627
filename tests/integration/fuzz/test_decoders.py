"""Fuzzing the OTLP decoders: they may only return a batch or raise `DecodeError` /
`BodyTooLargeError`, and what they return must be storable and within the value caps.
"""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from faultfinder.reading.model import AttributeValue
from faultfinder.server.db.engine import dumps_json
from faultfinder.server.otlp import decode
from faultfinder.server.otlp.decode import (
    BodyTooLargeError,
    DecodedBatch,
    DecodeError,
    decode_json,
    decode_protobuf,
    decompress,
)
from faultfinder.server.otlp.otlp_json import request_to_otlp_json
from tests.integration.fuzz.strategies import (
    FUZZ,
    HUGE,
    LIMIT,
    MARKER_ROOM,
    add_attributes,
    export_requests,
    huge_values,
    json_values,
    mutated_body,
    mutations,
    odd_hex_ids,
    texts,
)
from tests.otlp_helpers import framework_spans, json_body, protobuf_body

# --- properties of a decoded batch ----------------------------------------------------------


def _within_caps(value: AttributeValue, depth: int = 0) -> None:
    if isinstance(value, str):
        assert len(value.encode("utf-8", "surrogatepass")) <= LIMIT + MARKER_ROOM
    elif isinstance(value, bytes):
        assert len(value) <= LIMIT + MARKER_ROOM
    elif isinstance(value, list):
        assert depth < decode.MAX_VALUE_DEPTH
        for item in value:
            _within_caps(item, depth + 1)
    elif isinstance(value, dict):
        assert depth < decode.MAX_VALUE_DEPTH
        for item in value.values():
            _within_caps(item, depth + 1)


def check_batch(batch: DecodedBatch) -> None:
    """A decoded batch is usable: well-formed ids, capped values, storable as JSON."""
    assert isinstance(batch, DecodedBatch)
    for record in batch.spans:
        assert len(record.trace_id) == 32 and int(record.trace_id, 16) > 0
        assert len(record.span_id) == 16 and int(record.span_id, 16) > 0
        assert record.parent_span_id is None or len(record.parent_span_id) == 16
        # Storable: the database columns are signed 64-bit.
        assert record.start_time_unix_nano < 2**63 and record.end_time_unix_nano < 2**63
        for values in (record.attributes, record.resource_attributes):
            for value in values.values():
                _within_caps(value)
        for event in record.events:
            for value in event.attributes.values():
                _within_caps(value)
        dumps_json([record.attributes, record.resource_attributes])


def decodes_or_refuses(body: bytes, *, as_json: bool) -> DecodedBatch | None:
    """Decode, allowing only DecodeError as a refusal."""
    try:
        batch = (decode_json if as_json else decode_protobuf)(body)
    except DecodeError:
        return None
    check_batch(batch)
    return batch


# --- the decoders ---------------------------------------------------------------------------


@FUZZ
@given(export_requests())
def test_structured_requests_decode_or_refuse_in_both_encodings(
    request: ExportTraceServiceRequest,
) -> None:
    total = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
    for body, as_json in (
        (request.SerializeToString(), False),
        (request_to_otlp_json(request), True),
    ):
        batch = decodes_or_refuses(body, as_json=as_json)
        if batch is not None:
            # Each span is either kept or counted as rejected, none vanishes.
            assert len(batch.spans) + batch.rejected == total


def _payload_bytes(value: AnyValue) -> int:
    if value.HasField("array_value"):
        return _payload_bytes(value.array_value.values[0])
    if value.HasField("bytes_value"):
        return len(value.bytes_value)
    return len(value.string_value.encode())


# Hypothesis warns that reprs of megabyte values are large; they are meant to be.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
@HUGE
@given(st.lists(huge_values, min_size=1, max_size=3), st.booleans())
def test_huge_values_are_truncated_not_refused(values: list[AnyValue], as_json: bool) -> None:
    request = ExportTraceServiceRequest.FromString(protobuf_body(framework_spans()))
    pairs = [(f"huge.{n}", value) for n, value in enumerate(values)]
    add_attributes(request.resource_spans[0].scope_spans[0].spans[0].attributes, pairs)
    body = request_to_otlp_json(request) if as_json else request.SerializeToString()
    batch = decodes_or_refuses(body, as_json=as_json)
    assert batch is not None and batch.rejected == 0  # the span is kept, not refused
    over = sum(_payload_bytes(value) > LIMIT for value in values)
    assert batch.truncated_values == over


@FUZZ
@given(mutations, st.booleans())
def test_mutated_real_bodies_decode_or_refuse(
    mutation: tuple[list[tuple[int, int, int]], int | None], as_json: bool
) -> None:
    spans = framework_spans()
    original = json_body(spans) if as_json else protobuf_body(spans)
    decodes_or_refuses(mutated_body(original, *mutation), as_json=as_json)


@FUZZ
@given(st.data())
def test_real_json_with_odd_nodes_decodes_or_refuses(data: st.DataObject) -> None:
    document = json.loads(json_body(framework_spans()))
    # Held before any replacement, so later edits still have a place to go.
    resource_spans = document["resourceSpans"][0]
    span = resource_spans["scopeSpans"][0]["spans"][0]
    for _ in range(data.draw(st.integers(1, 4))):
        target = data.draw(st.sampled_from(["span", "id", "attribute", "resource", "top"]))
        if target == "id":
            key = data.draw(st.sampled_from(["traceId", "spanId", "parentSpanId"]))
            span[key] = data.draw(odd_hex_ids)
        elif target == "span":
            span[data.draw(st.sampled_from(sorted(span)))] = data.draw(json_values)
        elif target == "attribute":
            if not isinstance(span.get("attributes"), list):
                span["attributes"] = []
            span["attributes"].append({"key": data.draw(texts), "value": data.draw(json_values)})
        elif target == "resource":
            resource_spans["resource"] = data.draw(json_values)
        else:
            key = data.draw(st.sampled_from(["resourceSpans", "extra"]))
            document[key] = data.draw(json_values)
    decodes_or_refuses(json.dumps(document).encode(), as_json=True)


@FUZZ
@given(st.binary(max_size=4), st.binary(min_size=1, max_size=12))
def test_invalid_utf8_in_strings_is_refused_or_replaced(prefix: bytes, garbage: bytes) -> None:
    # Same-length substitution keeps every protobuf length prefix valid.
    marker = "K" * len(garbage)
    request = ExportTraceServiceRequest.FromString(protobuf_body(framework_spans()))
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.attributes.add(key=marker).value.string_value = marker
    body = request.SerializeToString().replace(marker.encode(), garbage)
    decodes_or_refuses(body, as_json=False)
    text = json_body(framework_spans()).replace(b'"name":"', b'"name":"' + prefix + garbage, 1)
    decodes_or_refuses(text, as_json=True)


@FUZZ
@given(st.binary(max_size=2000))
def test_raw_bytes_decode_or_refuse(body: bytes) -> None:
    decodes_or_refuses(body, as_json=False)
    decodes_or_refuses(body, as_json=True)


ENCODINGS = ["gzip", "deflate", "x-gzip", "identity", "br", "gzip, deflate", "", "GZIP"]


@FUZZ
@given(st.binary(max_size=3000), st.sampled_from(ENCODINGS), st.sampled_from(["raw", "gz", "zl"]))
def test_decompress_returns_bounded_bytes_or_refuses(
    payload: bytes, encoding: str, wrap: str
) -> None:
    body = {"raw": payload, "gz": gzip.compress(payload), "zl": zlib.compress(payload)}[wrap]
    try:
        out = decompress(body, encoding, max_size=2048)
    except (DecodeError, BodyTooLargeError):
        return
    assert isinstance(out, bytes) and len(out) <= 2048
