"""Fuzzing: the OTLP decoders and the HTTP API take hostile input without crashing.

The decoders may only return a batch or raise `DecodeError` / `BodyTooLargeError`; what
they return must be storable and within the value caps. Through a real sidecar, no
request may get a 5xx (ingest may say 503 with Retry-After) and the server must keep
serving afterwards.

The API targets run against a sidecar on SQLite and one on PostgreSQL (whose text
columns refuse NUL, among other differences). Cases per target: `FAULTFINDER_FUZZ_EXAMPLES`
(default 200). The nightly run:
`FAULTFINDER_FUZZ_EXAMPLES=10000 .venv/bin/pytest tests/integration/test_fuzz.py
--hypothesis-show-statistics`, or `faultfinder bench chaos --fuzz 10000`.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import zlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

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
from faultfinder.server.otlp.model import AttributeValue
from faultfinder.server.otlp.otlp_json import request_to_otlp_json
from tests.integration.conftest import DIALECTS
from tests.integration.conftest import _postgres_database as postgres_database
from tests.integration.sidecar import Sidecar, running_sidecar
from tests.otlp_helpers import framework_spans, json_body, protobuf_body

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

# --- strategies -----------------------------------------------------------------------------

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


def _add_attributes(target: Any, pairs: list[tuple[str, AnyValue]]) -> None:
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
    _add_attributes(span.attributes, draw(attributes))
    for _ in range(draw(st.integers(0, 2))):
        event = span.events.add(name=draw(texts), time_unix_nano=draw(uint64))
        _add_attributes(event.attributes, draw(attributes))
    return span


@st.composite
def export_requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(0, 2))):
        resource_spans = request.resource_spans.add()
        _add_attributes(resource_spans.resource.attributes, draw(attributes))
        for _ in range(draw(st.integers(0, 2))):
            scope = resource_spans.scope_spans.add()
            scope.scope.name = draw(texts)
            for span in draw(st.lists(spans(), max_size=3)):
                scope.spans.add().CopyFrom(span)
    return request


def _mutate(body: bytes, edits: list[tuple[int, int, int]], cut: int | None) -> bytes:
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
    _add_attributes(request.resource_spans[0].scope_spans[0].spans[0].attributes, pairs)
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
    decodes_or_refuses(_mutate(original, *mutation), as_json=as_json)


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


# --- the API of a real sidecar --------------------------------------------------------------

REAL_BODY = protobuf_body(framework_spans())
"""Built once: strategies must not draw the SDK's random ids themselves."""
SAFE_ATTRIBUTORS = ["first_error", "random"]
"""Known attributors that answer at once (no model endpoint involved)."""
PROTOBUF = {"content-type": "application/x-protobuf"}


@pytest.fixture(scope="module", params=DIALECTS)
def sidecar(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sidecar]:
    directory = tmp_path_factory.mktemp("fuzz")
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite+aiosqlite:///{directory / 'fuzz.db'}"
        else:
            url = stack.enter_context(postgres_database())
        server = stack.enter_context(
            running_sidecar(
                url,
                directory,
                FAULTFINDER_QUIET_PERIOD="0.3",
                FAULTFINDER_SWEEP_INTERVAL="0.2",
                FAULTFINDER_ATTRIBUTORS="first_error",
                FAULTFINDER_GRPC_ENABLED="false",
                FAULTFINDER_INGEST_ACK_TIMEOUT="10",
            )
        )
        yield server


@pytest.fixture(scope="module")
def client(sidecar: Sidecar) -> Iterator[httpx.Client]:
    # Pooled connections expire before the server's 5 s keep-alive timeout: reusing one
    # the server is closing at that moment fails on the client side ("disconnected").
    limits = httpx.Limits(keepalive_expiry=1.0)
    with httpx.Client(base_url=sidecar.url, timeout=60, limits=limits) as http:
        yield http


@pytest.fixture(scope="module")
def run_id(client: httpx.Client) -> str:
    spans = framework_spans()
    assert client.post("/v1/traces", content=protobuf_body(spans), headers=PROTOBUF).is_success
    return f"{spans[0].context.trace_id:032x}"


def answered(response: httpx.Response) -> None:
    """No 5xx at all: the queue never fills here, so even a 503 from ingest means a batch
    could not be stored (a poison span blocking the writer)."""
    request = response.request
    assert response.status_code < 500, (
        f"{request.method} {request.url} → {response.status_code}: {response.text[:500]}"
    )


run_ids = st.one_of(st.just("known"), st.text(min_size=1, max_size=60))
numbers_as_text = st.one_of(
    texts, st.integers().map(str), st.integers(-(2**80), 2**80).map(str), st.floats().map(str)
)


def _path_id(run: str, known: str) -> str:
    return quote(known if run == "known" else run, safe="")


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, json_values)


steps = st.lists(
    st.fixed_dictionaries(
        {"index": _maybe(st.integers(-2, 8)), "agent": _maybe(texts)},
        optional={
            "content": _maybe(st.one_of(texts, huge_strings)),
            "kind": _maybe(st.sampled_from(["llm", "tool", "human", "other", "?"])),
            "status": _maybe(st.sampled_from(["ok", "error", "?"])),
            "role": _maybe(texts),
        },
    ),
    max_size=6,
)
trajectories = st.fixed_dictionaries(
    {"run_id": _maybe(texts), "steps": _maybe(steps)},
    optional={"task": _maybe(texts), "ground_truth": _maybe(texts), "metadata": json_values},
)
attributor_names = st.one_of(st.sampled_from([*SAFE_ATTRIBUTORS, "nope", ""]), json_values)


@FUZZ
@given(
    _maybe(
        st.fixed_dictionaries(
            {"trajectory": _maybe(trajectories)},
            optional={
                "attributor": attributor_names,
                "wait": _maybe(st.booleans()),
                "timeout": _maybe(st.floats(allow_nan=False, allow_infinity=False)),
                "use_ground_truth": _maybe(st.booleans()),
            },
        )
    )
)
def test_post_attribute_never_answers_5xx(client: httpx.Client, body: Any) -> None:
    answered(client.post("/api/attribute", json=body))


@FUZZ
@given(
    run_ids,
    st.sampled_from(["outcome", "labels", "attributions"]),
    _maybe(
        st.fixed_dictionaries(
            {},
            optional={
                "outcome": _maybe(st.sampled_from(["success", "failure", "maybe"])),
                "reason": _maybe(st.one_of(texts, huge_strings)),
                "ground_truth": _maybe(texts),
                "final_answer": _maybe(texts),
                "agent": _maybe(st.sampled_from(["Orchestrator", "WebSurfer", "Nobody"])),
                "step": _maybe(st.integers(-3, 2**70)),
                "author": _maybe(texts),
                "attributor": attributor_names,
            },
        )
    ),
)
@example("known", "labels", {"agent": "WebSurfer", "step": 1, "reason": "\x00", "author": "\x00"})
def test_run_actions_never_answer_5xx(
    client: httpx.Client, run_id: str, run: str, action: str, body: Any
) -> None:
    answered(client.post(f"/api/runs/{_path_id(run, run_id)}/{action}", json=body))


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(["status", "project", "agent", "since", "until", "limit", "cursor", "x"]),
        numbers_as_text,
        max_size=5,
    ),
    run_ids,
    st.sampled_from(["", "/jobs", "/labels"]),
    st.one_of(st.integers(-5, 2**70).map(str), texts),
    st.dictionaries(st.sampled_from(["window", "bucket"]), numbers_as_text, max_size=2),
)
# Found by this test once (5xx from numbers beyond the database's 64-bit integers); kept.
@example({"since": "9223372037"}, "known", "", str(2**70), {"window": "1e300"})
@example({"until": "-inf"}, "known", "", str(2**31), {"window": "nan"})
@example({"agent": "\x00", "project": "a\x00"}, "a\x00b", "/jobs", "0", {})
def test_queries_never_answer_5xx(
    client: httpx.Client,
    run_id: str,
    params: dict[str, str],
    run: str,
    suffix: str,
    job: str,
    stats_params: dict[str, str],
) -> None:
    answered(client.get("/api/runs", params=params))
    answered(client.get(f"/api/runs/{_path_id(run, run_id)}{suffix}"))
    answered(client.get(f"/api/jobs/{quote(job, safe='')}"))
    answered(client.get("/api/stats", params=stats_params))


@FUZZ
@given(
    st.one_of(
        mutations.map(lambda m: _mutate(REAL_BODY, *m)),
        export_requests().map(lambda r: r.SerializeToString()),
        st.binary(max_size=500),
    ),
    st.sampled_from(["application/x-protobuf", "application/json", "text/plain", ""]),
    st.sampled_from(["", "gzip", "deflate", "br"]),
    st.sampled_from(["/v1/traces", "/v1/logs"]),
)
def test_ingest_of_hostile_bodies_never_answers_5xx(
    client: httpx.Client, body: bytes, content_type: str, encoding: str, path: str
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    if encoding:
        headers["content-encoding"] = encoding
        if encoding == "gzip":
            body = gzip.compress(body)
    answered(client.post(path, content=body, headers=headers))


@FUZZ
@given(
    st.sampled_from(
        [
            "/api/attribute",
            "/api/runs/known/outcome",
            "/api/runs/known/labels",
            "/v1/traces",
            "/v1/logs",
        ]
    ),
    st.binary(max_size=300),
)
def test_undecodable_json_bodies_never_answer_5xx(
    client: httpx.Client, run_id: str, path: str, body: bytes
) -> None:
    target = path.replace("known", run_id)
    answered(client.post(target, content=body, headers={"content-type": "application/json"}))


def test_a_span_from_beyond_2262_is_rejected_alone_and_ingest_goes_on(
    client: httpx.Client,
) -> None:
    # Found by this fuzzing: such a span (fixed64 on the wire) failed every write of its
    # batch, and the writer retried it forever while all ingest waited behind it.
    request = ExportTraceServiceRequest.FromString(protobuf_body(framework_spans()))
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].end_time_unix_nano = 2**64 - 1
    answer = client.post("/v1/traces", content=request.SerializeToString(), headers=PROTOBUF)
    assert answer.status_code == 200
    partial = ExportTraceServiceResponse.FromString(answer.content).partial_success
    assert partial.rejected_spans == 1 and "2262" in partial.error_message
    later = client.post("/v1/traces", content=protobuf_body(framework_spans()), headers=PROTOBUF)
    assert later.status_code == 200


def test_after_the_fuzzing_every_stored_run_is_served_and_ingest_works(
    client: httpx.Client, run_id: str
) -> None:
    # Whatever the hostile requests stored must not break reading it back (the assembler
    # runs over fuzzed spans here) nor wedge the writer.
    fresh = framework_spans()
    assert client.post("/v1/traces", content=protobuf_body(fresh), headers=PROTOBUF).is_success
    assert client.get("/readyz").status_code == 200
    cursor: str | None = None
    seen = 0
    while True:
        params: dict[str, Any] = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        page = client.get("/api/runs", params=params)
        assert page.status_code == 200, page.text
        for item in page.json()["items"]:
            seen += 1
            answered(client.get(f"/api/runs/{quote(item['id'], safe='')}"))
        cursor = page.json()["next_cursor"]
        if not cursor:
            break
    assert seen >= 2


JSON_WRITES = (
    "/api/attribute",
    "/api/runs/known/outcome",
    "/api/runs/known/labels",
    "/api/runs/known/attributions",
    "/v1/traces",
    "/v1/logs",
)


@pytest.mark.parametrize("levels", [100, 1_000, 100_000])
@pytest.mark.parametrize("shape", ["list", "object", "value"])
def test_deeply_nested_json_is_a_4xx_on_every_json_endpoint(
    client: httpx.Client, run_id: str, levels: int, shape: str
) -> None:
    opened, closed = ("[", "]") if shape == "list" else ('{"a":', "}")
    nested = opened * levels + "1" + closed * levels
    body = nested if shape != "value" else '{"trajectory": ' + nested + ', "agent": ' + nested + "}"
    for path in JSON_WRITES:
        answer = client.post(
            path.replace("known", run_id),
            content=body.encode(),
            headers={"content-type": "application/json"},
        )
        answered(answer)
        if not path.startswith("/v1/"):  # OTLP ignores unknown fields: `{"a": …}` is empty
            assert 400 <= answer.status_code < 500, (path, answer.status_code)
