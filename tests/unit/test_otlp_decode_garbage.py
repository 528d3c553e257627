"""OTLP decoding of garbage: truncated, corrupted, random and too deeply nested bodies
decode or raise `DecodeError`, never anything else."""

from __future__ import annotations

import contextlib
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from faultfinder.server.errors import (
    DecodeError,
)
from faultfinder.server.otlp.decode import (
    NESTED_TOO_DEEP,
    DecodedBatch,
    decode_json,
    decode_protobuf,
)
from tests.otlp_helpers import (
    framework_spans,
    json_body,
    protobuf_body,
)


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


def test_nesting_beyond_the_parser_limit_is_cut_not_refused() -> None:
    # AnyValue.array_value (5) → ArrayValue.values (1) → AnyValue …, 150 levels deep.
    value = AnyValue(string_value="leaf").SerializeToString()
    document: dict[str, object] = {"stringValue": "leaf"}
    for _ in range(150):
        value = _field(5, _field(1, value))
        document = {"arrayValue": {"values": [document]}}
    attribute = _field(1, b"deep") + _field(2, value)
    span = _field(1, b"\x01" * 16) + _field(2, b"\x02" * 8) + _field(9, attribute)
    body = _field(1, _field(2, _field(2, span)))  # resource_spans → scope_spans → spans
    (decoded,) = decode_protobuf(body).spans
    assert _innermost(decoded.attributes["deep"]) == NESTED_TOO_DEEP

    json_document = json.loads(json_body(framework_spans()))
    json_span = json_document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    json_span["attributes"].append({"key": "deep", "value": document})
    batch = decode_json(json.dumps(json_document).encode())
    (decoded,) = [span for span in batch.spans if "deep" in span.attributes]
    assert _innermost(decoded.attributes["deep"]) == NESTED_TOO_DEEP


def _innermost(value: object) -> object:
    while isinstance(value, list):
        (value,) = value
    return value
