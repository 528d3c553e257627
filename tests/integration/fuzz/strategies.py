"""What the fuzz suite draws: OTLP requests and values (deep, huge, odd), mutated real
bodies and arbitrary JSON, and the hypothesis settings every target runs with.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

EXAMPLES = int(os.environ.get("FAULTFINDER_FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
HUGE = settings(FUZZ, max_examples=max(10, EXAMPLES // 10))
"""Megabyte values cost milliseconds each: a tenth of the cases."""
LIMIT = 1 << 20
MARKER_ROOM = len("…[truncated 99999999999 bytes]".encode())


HUGE_SIZES = (LIMIT - 1, LIMIT, LIMIT + 1, 3 * LIMIT)
huge_strings = st.builds(
    lambda char, size: char * (size // len(char.encode())),
    st.sampled_from(["a", "é", "€", "😀"]),
    st.sampled_from(HUGE_SIZES),
)
int64 = st.integers(-(2**63), 2**63 - 1)
uint64 = st.integers(0, 2**64 - 1)
texts = st.text(max_size=40)


# Messages are built in place with CopyFrom: protobuf's constructors re-parse nested
# messages and refuse values nested as deeply as the ones this module means to send.


def _array(values: list[AnyValue]) -> AnyValue:
    value = AnyValue()
    value.array_value.SetInParent()
    for item in values:
        value.array_value.values.add().CopyFrom(item)
    return value


def _kvlist(pairs: list[tuple[str, AnyValue]]) -> AnyValue:
    value = AnyValue()
    value.kvlist_value.SetInParent()
    for key, item in pairs:
        value.kvlist_value.values.add(key=key).value.CopyFrom(item)
    return value


def add_attributes(target: Any, pairs: list[tuple[str, AnyValue]]) -> None:
    for key, value in pairs:
        target.add(key=key).value.CopyFrom(value)


leaf_values = st.one_of(
    texts.map(lambda s: AnyValue(string_value=s)),
    st.booleans().map(lambda b: AnyValue(bool_value=b)),
    int64.map(lambda i: AnyValue(int_value=i)),
    st.floats().map(lambda f: AnyValue(double_value=f)),
    st.binary(max_size=40).map(lambda b: AnyValue(bytes_value=b)),
    st.just(AnyValue()),
)
any_value_trees = st.recursive(
    leaf_values,
    lambda children: st.one_of(
        st.lists(children, max_size=4).map(_array),
        st.lists(st.tuples(texts, children), max_size=4).map(_kvlist),
    ),
    max_leaves=25,
)


def _chain(levels: int, kvlist_levels: set[int]) -> AnyValue:
    """A value nested `levels` deep (past the parser's own limit at the top of the range)."""
    root = AnyValue()
    node = root
    for level in range(levels):
        if level in kvlist_levels:
            node = node.kvlist_value.values.add(key=f"k{level}").value
        else:
            node = node.array_value.values.add()
    node.string_value = "leaf"
    return root


deep_values = st.builds(_chain, st.integers(0, 60), st.lists(st.booleans(), min_size=1, max_size=4))
huge_values = st.one_of(
    huge_strings.map(lambda s: AnyValue(string_value=s)),
    st.sampled_from(HUGE_SIZES).map(lambda n: AnyValue(bytes_value=b"\xff" * n)),
    huge_strings.map(lambda s: _array([AnyValue(string_value=s)])),
)
attribute_values = st.one_of(any_value_trees, deep_values)
attributes = st.lists(st.tuples(texts, attribute_values), max_size=4)
ids16 = st.one_of(st.binary(min_size=16, max_size=16), st.binary(max_size=20))
ids8 = st.one_of(st.binary(min_size=8, max_size=8), st.binary(max_size=10))


@st.composite
def spans(draw: st.DrawFn) -> Span:
    span = Span(
        trace_id=draw(ids16),
        span_id=draw(ids8),
        parent_span_id=draw(st.one_of(st.just(b""), ids8)),
        name=draw(texts),
        start_time_unix_nano=draw(uint64),
        end_time_unix_nano=draw(uint64),
    )
    # proto3 enums are open: codes beyond the defined ones are legal on the wire.
    span.kind = draw(st.integers(0, 7))  # type: ignore[assignment]
    span.status.code = draw(st.integers(0, 5))  # type: ignore[assignment]
    span.status.message = draw(texts)
    add_attributes(span.attributes, draw(attributes))
    for _ in range(draw(st.integers(0, 2))):
        event = span.events.add(name=draw(texts), time_unix_nano=draw(uint64))
        add_attributes(event.attributes, draw(attributes))
    return span


@st.composite
def export_requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(0, 2))):
        resource_spans = request.resource_spans.add()
        add_attributes(resource_spans.resource.attributes, draw(attributes))
        for _ in range(draw(st.integers(0, 2))):
            scope = resource_spans.scope_spans.add()
            scope.scope.name = draw(texts)
            for span in draw(st.lists(spans(), max_size=3)):
                scope.spans.add().CopyFrom(span)
    return request


def mutated_body(body: bytes, edits: list[tuple[int, int, int]], cut: int | None) -> bytes:
    """Overwrite, insert or delete bytes at the given positions, then maybe truncate."""
    data = bytearray(body)
    for position, byte, operation in edits:
        where = position % (len(data) + 1)
        if operation == 0 and where < len(data):
            data[where] = byte
        elif operation == 1:
            data.insert(where, byte)
        elif where < len(data):
            del data[where]
    return bytes(data[:cut] if cut is not None else data)


mutations = st.tuples(
    st.lists(
        st.tuples(st.integers(0, 1 << 20), st.integers(0, 255), st.integers(0, 2)), max_size=8
    ),
    st.one_of(st.none(), st.integers(0, 1 << 16)),
)
json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), int64, st.floats(allow_nan=False, allow_infinity=False), texts
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(texts, children, max_size=4)
    ),
    max_leaves=15,
)
odd_hex_ids = st.one_of(
    st.text(alphabet="0123456789abcdefABCDEFxg", max_size=40),
    st.integers(),
    st.none(),
    st.just("0" * 32),
)
