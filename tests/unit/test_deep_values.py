"""Attribute values nested too deep for protobuf's parser (three messages a kvlist level,
100 at most) are cut on the wire with a visible marker, not refused with the request."""

from __future__ import annotations

import json

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from faultfinder.server.errors import DecodeError
from faultfinder.server.otlp.decode import decode_json, decode_protobuf
from faultfinder.server.otlp.deep_values import (
    NESTED_TOO_DEEP,
    WIRE_VALUE_DEPTH,
    cut_deep_values,
)
from faultfinder.server.otlp.log_events import decode_logs_protobuf
from faultfinder.server.otlp.wire_limits import _encode_varint


def _field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def _kvlists(levels: int, leaf: str = "leaf") -> bytes:
    """An AnyValue of `levels` nested kvlists around a string, as wire bytes (the Python
    classes cannot build one: they copy through the same parser)."""
    value = _field(1, leaf.encode())
    for level in range(levels):
        key_value = _field(1, f"k{level}".encode()) + _field(2, value)
        value = _field(6, _field(1, key_value))
    return value


def _attribute(key: str, value: bytes) -> bytes:
    return _field(1, key.encode()) + _field(2, value)


def _trace_request(*attributes: bytes, event_attribute: bytes | None = None) -> bytes:
    span = _field(1, b"\x02" * 16) + _field(2, b"\x03" * 8) + _field(5, b"deep span")
    span += b"".join(_field(9, attribute) for attribute in attributes)
    if event_attribute is not None:
        span += _field(11, _field(2, b"event") + _field(3, event_attribute))
    return _field(1, _field(2, _field(2, span)))


def _depth_and_leaf(value: object) -> tuple[int, object]:
    depth = 0
    while isinstance(value, dict):
        (value,) = value.values()
        depth += 1
    return depth, value


@pytest.mark.parametrize("levels", [WIRE_VALUE_DEPTH + 5, 60, 2_000])
def test_a_span_attribute_nested_too_deep_for_the_parser_is_cut_and_the_rest_kept(
    levels: int,
) -> None:
    body = _trace_request(
        _attribute("deep", _kvlists(levels)),
        _attribute("shallow", _kvlists(3)),
        event_attribute=_attribute("deep in an event", _kvlists(levels)),
    )
    with pytest.raises(Exception, match="MaxDepth"):
        ExportTraceServiceRequest.FromString(body)
    batch = decode_protobuf(body)
    (span,) = batch.spans
    assert batch.truncated_values == 2
    assert _depth_and_leaf(span.attributes["deep"]) == (WIRE_VALUE_DEPTH, NESTED_TOO_DEEP)
    assert _depth_and_leaf(span.attributes["shallow"]) == (3, "leaf")
    (event,) = span.events
    assert _depth_and_leaf(event.attributes["deep in an event"]) == (
        WIRE_VALUE_DEPTH,
        NESTED_TOO_DEEP,
    )


def test_a_request_the_parser_takes_is_not_rewritten() -> None:
    body = _trace_request(_attribute("a", _kvlists(5)))
    assert cut_deep_values(body) == (body, 0)
    assert decode_protobuf(body).truncated_values == 0


def test_a_log_record_body_nested_too_deep_is_cut() -> None:
    record = _field(5, _kvlists(80)) + _field(6, _attribute("event.name", _field(1, b"x")))
    body = _field(1, _field(2, _field(2, record)))
    with pytest.raises(Exception, match="MaxDepth"):
        ExportLogsServiceRequest.FromString(body)
    batch = decode_logs_protobuf(body)
    assert batch.truncated_values == 1


def test_a_malformed_deep_body_is_still_a_clear_400() -> None:
    body = _trace_request(_attribute("deep", _kvlists(60)))
    with pytest.raises(DecodeError, match="invalid protobuf"):
        decode_protobuf(body[:-7])


def test_an_otlp_json_kvlist_nested_too_deep_for_the_parser_is_cut() -> None:
    value: dict[str, object] = {"stringValue": "leaf"}
    for level in range(60):
        value = {"kvlistValue": {"values": [{"key": f"k{level}", "value": value}]}}
    span = {
        "traceId": "02" * 16,
        "spanId": "03" * 8,
        "name": "deep span",
        "attributes": [{"key": "deep", "value": value}, {"key": "n", "value": {"intValue": "7"}}],
    }
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    (decoded,) = decode_json(json.dumps(document).encode()).spans
    assert _depth_and_leaf(decoded.attributes["deep"]) == (WIRE_VALUE_DEPTH, NESTED_TOO_DEEP)
    assert decoded.attributes["n"] == 7
