"""Small hostile bodies cost the sidecar little on a real process: what they would expand
into is counted on the wire before it is parsed, and their decoding is off the event loop
(one process: `FAULTFINDER_PROCESSES=1`), so `/healthz` is answered meanwhile.

- a body gzipped twice (426 bytes that would inflate to 64 MiB of empty spans) is refused
  before inflating;
- 16 MiB of empty spans, and 16 MiB of empty OTLP/JSON spans, get 413 within bounded
  memory;
- one span with millions of empty events is refused, and one with thousands keeps its
  first `MAX_EVENTS_PER_SPAN`; a value nested past protobuf's parser gets 400 saying so;
- refused gRPC calls do not keep their requests alive;
- a request of spans the database refuses is rejected in a bounded number of
  transactions, the other clients' spans stored meanwhile;
- a failed run whose spans filled it still takes its failed root, ends failed and is
  attributed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import httpx
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue, KeyValueList

from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.server.ingest import SPLIT_BUDGET, SpanWriter, Stored
from faultfinder.server.otlp.deep_values import NESTED_TOO_DEEP, WIRE_VALUE_DEPTH
from faultfinder.server.otlp.wire_limits import MAX_EVENTS_PER_SPAN
from faultfinder.server.store import SpanStore
from tests.integration.sidecar import Sidecar, quick_sidecar, running_sidecar, spawned_children
from tests.integration.test_ingest_limits import stored_spans
from tests.otlp_helpers import (
    MS,
    T0,
    SpanRecorder,
    protobuf_body,
    span_records,
    trajectory_spans,
)

MIB = 1024 * 1024
PROTOBUF = {"content-type": "application/x-protobuf"}
JSON = {"content-type": "application/json"}
EXPORT = f"/{trace_service_pb2.DESCRIPTOR.services_by_name['TraceService'].full_name}/Export"
TRACE_ID = "01" * 16


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _request(spans: bytes) -> bytes:
    """An ExportTraceServiceRequest of one resource and scope holding `spans` (their
    wire bytes)."""
    return _field(1, _field(2, spans))


def _empty_spans(size: int) -> bytes:
    return _request(b"\x12\x00" * (size // 2))


def _span_with_events(events: int) -> bytes:
    span = _field(1, bytes.fromhex(TRACE_ID)) + _field(2, b"\x02" * 8) + _field(5, b"root")
    return _request(_field(2, span + b"\x5a\x00" * events))


def _peak_rss(sidecar: Sidecar) -> int:
    """Bytes: the most the sidecar's processes have held at once (VmHWM), summed."""
    total = 0
    for pid in [sidecar.process.pid, *spawned_children(sidecar.process.pid)]:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) * 1024
    return total


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


@contextmanager
def _healthz_stall(sidecar: Sidecar) -> Iterator[list[float]]:
    """The longest `/healthz` took while the block ran (one float in the list, at exit)."""
    longest = [0.0]
    done = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=sidecar.url, timeout=60) as client:
            while not done.is_set():
                started = time.perf_counter()
                client.get("/healthz")
                longest[0] = max(longest[0], time.perf_counter() - started)
                time.sleep(0.05)

    thread = threading.Thread(target=poll)
    thread.start()
    try:
        yield longest
    finally:
        done.set()
        thread.join()


def _post(sidecar: Sidecar, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{sidecar.url}/v1/traces", content=body, headers=headers, timeout=120)


def test_bodies_that_would_expand_are_refused_in_bounded_memory_and_time(
    tmp_path: Path,
) -> None:
    twice = gzip.compress(gzip.compress(_empty_spans(64 * MIB - 16), 9), 9)
    assert len(twice) < 1024
    empty = _empty_spans(16 * MIB - 16)
    spans = (16 * MIB - 100) // 3
    as_json = b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + b",".join([b"{}"] * spans)
    as_json += b"]}]}]}"
    events = _span_with_events(8_000_000)
    database = f"sqlite+aiosqlite:///{tmp_path / 'faultfinder.db'}"
    with running_sidecar(database, tmp_path, FAULTFINDER_PROCESSES="1") as sidecar:
        with _healthz_stall(sidecar) as stall:
            stacked = _post(sidecar, twice, {**PROTOBUF, "content-encoding": "gzip, gzip"})
            answers = [
                _post(sidecar, body, headers)
                for body, headers in ((empty, PROTOBUF), (as_json, JSON), (events, PROTOBUF))
            ]
        peak = _peak_rss(sidecar)
    assert stacked.status_code == 400
    assert b"stacks 2 encodings" in stacked.content
    assert [answer.status_code for answer in answers] == [413, 413, 413]
    assert stall[0] < 1.0
    assert peak < 1024 * MIB


def _deep_value(levels: int) -> AnyValue:
    value = AnyValue(string_value="bottom")
    for _ in range(levels):
        value = AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="k", value=value)]))
    return value


def test_a_span_of_too_many_events_keeps_the_first_ones_and_a_too_deep_value_is_cut(
    tmp_path: Path,
) -> None:
    deep = ExportTraceServiceRequest()
    span = deep.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id = bytes.fromhex("02" * 16), b"\x03" * 8
    span.attributes.add(key="deep", value=_deep_value(32))
    database = f"sqlite+aiosqlite:///{tmp_path / 'faultfinder.db'}"
    with running_sidecar(database, tmp_path, FAULTFINDER_PROCESSES="1") as sidecar:
        answer = _post(sidecar, _span_with_events(MAX_EVENTS_PER_SPAN + 500), PROTOBUF)
        too_deep = _post(sidecar, deep.SerializeToString(), PROTOBUF)
    assert answer.status_code == 200
    (span,) = asyncio.run(stored_spans(database, TRACE_ID))
    assert len(span.events) == MAX_EVENTS_PER_SPAN
    # Too deep for protobuf's parser: stored, the value cut with a visible marker.
    assert too_deep.status_code == 200, too_deep.text
    (stored,) = asyncio.run(stored_spans(database, "02" * 16))
    value, depth = stored.attributes["deep"], 0
    while isinstance(value, dict):
        (value,) = value.values()
        depth += 1
    assert (depth, value) == (WIRE_VALUE_DEPTH, NESTED_TOO_DEEP)


def test_refused_grpc_calls_do_not_keep_their_requests(tmp_path: Path) -> None:
    database = f"sqlite+aiosqlite:///{tmp_path / 'faultfinder.db'}"
    body = _empty_spans(15 * MIB)
    with (
        running_sidecar(database, tmp_path, FAULTFINDER_INGEST_KEYS="secret") as sidecar,
        grpc.insecure_channel(
            sidecar.grpc_endpoint, options=[("grpc.max_send_message_length", 64 * MIB)]
        ) as channel,
    ):
        export = channel.unary_unary(EXPORT)
        codes = []
        for call in range(45):
            if call == 5:  # gRPC's own buffers (about 100 MB) are allocated by then
                before = _rss(sidecar.process.pid)
            try:
                export(body, timeout=60)
            except grpc.RpcError as exc:
                codes.append(exc.code())
        after = _rss(sidecar.process.pid)
    assert set(codes) == {grpc.StatusCode.UNAUTHENTICATED}
    assert after - before < 100 * MIB


async def test_a_request_of_spans_the_database_refuses_is_rejected_in_bounded_time(
    store: SpanStore,
) -> None:
    """On each dialect: 2,000 spans the database refuses, in one request, cost a bounded
    number of transactions (not one per span), and another client's spans are stored."""
    recorder = SpanRecorder({"service.name": "poison"})
    for n in range(2001):
        recorder.span(f"span {n}", start=T0, end=T0 + MS)
    good, *rest = span_records(recorder.spans)
    poison = [dataclasses.replace(span, end_time_unix_nano=2**63) for span in rest]
    async with SpanWriter(
        store.write_spans, max_queued_spans=10_000, max_batch_spans=5_000, ack_timeout=60
    ) as writer:
        started = time.perf_counter()
        refused, other = await asyncio.gather(writer.submit(poison), writer.submit([good]))
        elapsed = time.perf_counter() - started
    assert refused.rejected == len(poison)
    assert other == Stored()
    assert writer.counters.write_errors <= 2 * SPLIT_BUDGET
    assert elapsed < 20
    assert [span.span_id for span in await store.run_spans(good.trace_id)] == [good.span_id]


def test_a_failed_run_over_its_span_limit_ends_failed_and_is_attributed(tmp_path: Path) -> None:
    steps = tuple(
        Step(index=i, agent=("Planner", "Counter")[i % 2], kind=StepKind.MESSAGE, content=f"{i}")
        for i in range(30)
    )
    spans = trajectory_spans(Trajectory(run_id="full", task="Count.", steps=steps))
    *children, root = spans
    failed_root = ExportTraceServiceRequest.FromString(protobuf_body([root]))
    failed_root.resource_spans[0].scope_spans[0].spans[0].status.code = 2  # ERROR
    env = {"FAULTFINDER_MAX_SPANS_PER_RUN": "20", "FAULTFINDER_AUDIT": "false"}
    with (
        quick_sidecar(tmp_path, **env) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as api,
    ):
        first = api.post("/v1/traces", content=protobuf_body(children), headers=PROTOBUF)
        last = api.post("/v1/traces", content=failed_root.SerializeToString(), headers=PROTOBUF)
        run_id = root.context.trace_id.to_bytes(16, "big").hex()
        deadline = time.monotonic() + 60
        while (run := api.get(f"/api/runs/{run_id}").json())["status"] not in (
            "attributed",
            "complete",
        ):
            assert time.monotonic() < deadline, run["status"]
            time.sleep(0.3)
    assert ExportTraceServiceResponse.FromString(first.content).partial_success.rejected_spans
    assert not ExportTraceServiceResponse.FromString(last.content).partial_success.rejected_spans
    assert run["status"] == "attributed"
    assert run["attributions"]
