"""Ingest limits on a real sidecar and store: oversized attribute values are cut with a
marker, counted, and their spans kept; a span the database refuses is rejected alone."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import grpc
import httpx
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from prometheus_client.parser import text_string_to_metric_families

from faultfinder.reading.model import SpanRecord
from faultfinder.server.db.engine import create_engine
from faultfinder.server.ingest import UNSTORABLE, SpanWriter, Stored
from faultfinder.server.otlp.decode import MAX_VALUE_BYTES
from faultfinder.server.store import SpanStore
from tests.integration.sidecar import running_sidecar
from tests.otlp_helpers import MS, T0, SpanRecorder, protobuf_body, span_records

PROTOBUF = {"content-type": "application/x-protobuf"}
EXPORT = f"/{trace_service_pb2.DESCRIPTOR.services_by_name['TraceService'].full_name}/Export"
OVER = 300_000
"""Bytes beyond the cap in the oversized value."""


async def stored_spans(database_url: str, trace_id: str) -> list[SpanRecord]:
    engine = create_engine(database_url)
    try:
        return await SpanStore(engine).run_spans(trace_id)
    finally:
        await engine.dispose()


def truncated_total(client: httpx.Client) -> float:
    text = client.get("/metrics").text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "faultfinder_ingest_values_truncated_total"
    )


def test_a_value_over_one_mebibyte_is_truncated_counted_and_its_span_stored(
    database_url: str, tmp_path: Path
) -> None:
    recorder = SpanRecorder({"service.name": "limits"})
    root = recorder.span("agent run", start=T0, end=T0 + 10 * MS)
    huge = "ä" * ((MAX_VALUE_BYTES + OVER) // 2)  # 2-byte characters, cut on a boundary
    recorder.span(
        "tool call",
        parent=root,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={"tool.output": huge, "tool.name": "fetch"},
    )
    body = protobuf_body(recorder.spans)
    trace_id = f"{recorder.spans[0].context.trace_id:032x}"
    with (
        running_sidecar(database_url, tmp_path, FAULTFINDER_GRPC_ENABLED="false") as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=60) as client,
    ):
        assert client.get("/api/stats/ingest").json()["values_truncated"] == 0
        assert truncated_total(client) == 0
        response = client.post("/v1/traces", content=body, headers=PROTOBUF)
        assert response.status_code == 200, response.text
        # Nothing rejected: the span is kept, only its value is cut.
        answer = ExportTraceServiceResponse.FromString(response.content)
        assert not answer.HasField("partial_success")
        stats = client.get("/api/stats/ingest").json()
        assert stats["values_truncated"] == 1
        assert stats["spans_acknowledged"] == 2
        assert truncated_total(client) == 1
        # A second request moves the running total on.
        client.post("/v1/traces", content=body, headers=PROTOBUF).raise_for_status()
        assert client.get("/api/stats/ingest").json()["values_truncated"] == 2
        assert truncated_total(client) == 2

    spans = {span.name: span for span in asyncio.run(stored_spans(database_url, trace_id))}
    assert set(spans) == {"agent run", "tool call"}
    value = spans["tool call"].attributes["tool.output"]
    assert isinstance(value, str)
    kept, marker = value.split("…[truncated ")
    assert marker.endswith(" bytes]")
    assert len(kept.encode()) <= MAX_VALUE_BYTES and set(kept) == {"ä"}
    assert len(kept.encode()) + int(marker.removesuffix(" bytes]")) == len(huge.encode())
    assert spans["tool call"].attributes["tool.name"] == "fetch"


async def test_a_span_the_database_refuses_is_rejected_alone(store: SpanStore) -> None:
    """On each dialect: a span time beyond 64 bits fails its whole batch in the database
    (SQLite: OverflowError, PostgreSQL: SQLSTATE 22000); the writer isolates it, stores
    the rest and reports it to its submitter, instead of retrying the batch forever."""
    recorder = SpanRecorder({"service.name": "limits"})
    for run in range(3):
        root = recorder.span(f"run {run}", start=T0, end=T0 + 10 * MS)
        for step in range(3):
            recorder.span(f"step {step}", parent=root, start=T0 + step * MS, end=T0 + 2 * MS)
    requests = [span_records(recorder.spans[i : i + 4]) for i in range(0, 12, 4)]
    bad = requests[1][2]
    requests[1][2] = dataclasses.replace(bad, end_time_unix_nano=2**63)
    async with SpanWriter(
        store.write_spans, max_queued_spans=100, max_batch_spans=100, ack_timeout=30
    ) as writer:
        outcomes = await asyncio.gather(*(writer.submit(spans) for spans in requests))
        assert await writer.submit(span_records(recorder.spans[:1])) == Stored()
    assert [outcome.rejected for outcome in outcomes] == [0, 1, 0]
    assert bad.span_id in outcomes[1].error_message
    assert writer.counters.spans_rejected == {UNSTORABLE: 1}
    stored = {span.span_id for run in requests for span in await store.run_spans(run[0].trace_id)}
    assert stored == {span.span_id for run in requests for span in run} - {bad.span_id}


def _minimal_spans(count: int) -> bytes:
    recorder = SpanRecorder({"service.name": "many"})
    root = recorder.span("root", start=T0, end=T0 + MS)
    for index in range(count - 1):
        recorder.span("s", parent=root, start=T0, end=T0 + index)
    return protobuf_body(recorder.spans)


def test_a_request_of_more_spans_than_allowed_is_refused_whole_on_both_transports(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    limit = 200
    env = {"FAULTFINDER_MAX_SPANS_PER_REQUEST": str(limit)}
    with (
        running_sidecar(sqlite_database_url, tmp_path, **env) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as client,
        grpc.insecure_channel(sidecar.grpc_endpoint) as channel,
    ):
        over = client.post("/v1/traces", content=_minimal_spans(limit + 1), headers=PROTOBUF)
        assert over.status_code == 413
        assert f"{limit + 1} spans" in over.text
        export = channel.unary_unary(EXPORT)
        try:
            export(_minimal_spans(limit + 1), timeout=10)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        else:
            raise AssertionError("the gRPC export of too many spans was accepted")
        stats = client.get("/api/stats/ingest").json()
        assert stats["spans_stored"] == 0  # refused whole: nothing of them stored
        assert stats["requests_rejected"]["too_many_spans"] == 2
        at_limit = client.post("/v1/traces", content=_minimal_spans(limit), headers=PROTOBUF)
        assert at_limit.status_code == 200
        answer = ExportTraceServiceResponse.FromString(at_limit.content)
        assert answer.partial_success.rejected_spans == 0


def _run_spans(run_id: str, count: int, first: int) -> bytes:
    """`count` spans of run `run_id` (by `faultfinder.run.id`), each its own trace."""
    recorder = SpanRecorder({"service.name": "limits"})
    for index in range(first, first + count):
        recorder.span(
            f"step {index}",
            start=T0 + index * MS,
            end=T0 + index * MS + 1,
            attributes={"faultfinder.run.id": run_id, "gen_ai.agent.name": "looper"},
        )
    return protobuf_body(recorder.spans)


def test_a_run_takes_at_most_its_span_limit_and_reading_it_stops_there(
    database_url: str, tmp_path: Path
) -> None:
    limit = 50
    env = {"FAULTFINDER_MAX_SPANS_PER_RUN": str(limit), "FAULTFINDER_AUDIT": "false"}
    with (
        running_sidecar(database_url, tmp_path, **env) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as client,
    ):
        answers = [
            ExportTraceServiceResponse.FromString(
                client.post(
                    "/v1/traces", content=_run_spans("loop", 30, first), headers=PROTOBUF
                ).content
            )
            for first in (0, 30, 60)
        ]
        assert [a.partial_success.rejected_spans for a in answers] == [0, 10, 30]
        assert "'loop' holds the most spans a run may have (50)" in (
            answers[1].partial_success.error_message
        )
        # Other runs are not held back by a full one.
        other = client.post("/v1/traces", content=_run_spans("other", 30, 0), headers=PROTOBUF)
        assert (
            ExportTraceServiceResponse.FromString(other.content).partial_success.rejected_spans == 0
        )
        stats = client.get("/api/stats/ingest").json()
        assert stats["spans_stored"] == limit + 30
        assert stats["spans_rejected"]["run_too_large"] == 40
        run = client.get("/api/runs/loop").json()
        assert run["n_spans"] == limit
        steps_at_limit = len(run["trajectory"]["steps"])
        assert limit - 1 <= steps_at_limit <= limit  # the first span is the run's root
        rejected = client.get("/metrics").text
        assert 'faultfinder_spans_rejected_total{reason="run_too_large"} 40.0' in rejected

    # A run stored past the limit anyway (here: by a sidecar that allowed more) is read
    # only up to the limit, and its page says how much it holds.
    with (
        running_sidecar(database_url, tmp_path, FAULTFINDER_MAX_SPANS_PER_RUN="200") as wide,
        httpx.Client(base_url=wide.url, timeout=30) as client,
    ):
        client.post("/v1/traces", content=_run_spans("wide", 120, 0), headers=PROTOBUF)
    with (
        running_sidecar(database_url, tmp_path, **env) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as client,
    ):
        run = client.get("/api/runs/wide").json()
        assert run["n_spans"] == 120
        assert len(run["trajectory"]["steps"]) == steps_at_limit
        assert run["trajectory"]["metadata"]["spans_read"] == limit
        assert run["trajectory"]["metadata"]["spans_stored"] == 120
