"""Overload: when the store stalls, ingest answers 503 with Retry-After and loses nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import grpc
import httpx
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from sqlalchemy.engine import make_url

from tests.integration.sidecar import running_sidecar
from tests.otlp_helpers import framework_spans, protobuf_body

PROTOBUF = {"content-type": "application/x-protobuf"}
EXPORT = f"/{trace_service_pb2.DESCRIPTOR.services_by_name['TraceService'].full_name}/Export"


def _advised_wait(error: grpc.aio.AioRpcError) -> int:
    """The RetryInfo of a refused gRPC export, read where the OpenTelemetry Python
    exporter reads it and where the Collector's exporters do; both must agree."""
    trailers = dict(error.trailing_metadata() or ())
    python_exporter = error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert status.code == code_pb2.UNAVAILABLE
    collector = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(collector)
    assert collector == python_exporter
    seconds: int = python_exporter.retry_delay.seconds
    return seconds


async def test_a_stalled_store_gets_503_with_retry_after_then_recovers(
    postgres_database_url: str, tmp_path: Path
) -> None:
    bodies = [protobuf_body(framework_spans()) for _ in range(6)]
    grpc_bodies = [protobuf_body(framework_spans()) for _ in range(2)]
    spans_per_body = len(framework_spans())
    with running_sidecar(
        postgres_database_url,
        tmp_path,
        FAULTFINDER_INGEST_QUEUE_SPANS=str(spans_per_body),
        FAULTFINDER_INGEST_ACK_TIMEOUT="60",
        FAULTFINDER_RETRY_AFTER="2",
    ) as sidecar:
        dsn = make_url(postgres_database_url).set(drivername="postgresql")
        locker = await asyncpg.connect(dsn.render_as_string(hide_password=False))
        try:
            # Another client holds the spans table: the sidecar's writer cannot commit.
            transaction = locker.transaction()
            await transaction.start()
            await locker.execute("LOCK TABLE spans IN ACCESS EXCLUSIVE MODE")
            async with httpx.AsyncClient(base_url=sidecar.url, timeout=90) as client:
                first = asyncio.create_task(
                    client.post("/v1/traces", content=bodies[0], headers=PROTOBUF)
                )
                await asyncio.sleep(1.0)  # let the first request fill the queue
                refused = [
                    await client.post("/v1/traces", content=body, headers=PROTOBUF)
                    for body in bodies[1:]
                ]
                assert {r.status_code for r in refused} == {503}
                # gRPC exporters are refused too, told to wait in the RetryInfo they read.
                async with grpc.aio.insecure_channel(sidecar.grpc_endpoint) as channel:
                    export = channel.unary_unary(EXPORT)
                    grpc_waits = []
                    for body in grpc_bodies:
                        try:
                            await export(body, timeout=10)
                        except grpc.aio.AioRpcError as error:
                            assert error.code() == grpc.StatusCode.UNAVAILABLE, error
                            grpc_waits.append(_advised_wait(error))
                        else:
                            raise AssertionError("a gRPC export was taken by a full queue")
                # At least the configured wait; more as senders pile up behind a store
                # that takes nothing, on either transport (one count of waiting senders).
                waits = [int(r.headers["retry-after"]) for r in refused] + grpc_waits
                assert waits[0] == 2 and waits == sorted(waits) and waits[-1] > 2, waits
                # Queries keep being answered while ingest is saturated.
                assert (await client.get("/healthz")).status_code == 200
                assert not first.done()  # not acknowledged: not yet durable
                await transaction.rollback()
                assert (await first).status_code == 200
                # After recovery the refused bodies go through (an exporter's retry).
                for body in bodies[1:]:
                    retried = await client.post("/v1/traces", content=body, headers=PROTOBUF)
                    assert retried.status_code == 200
                async with grpc.aio.insecure_channel(sidecar.grpc_endpoint) as channel:
                    export = channel.unary_unary(EXPORT)
                    for body in grpc_bodies:
                        await export(body, timeout=30)  # the gRPC exporters' retries
                stats = (await client.get("/api/stats/ingest")).json()
                assert stats["spans_stored"] == (len(bodies) + len(grpc_bodies)) * spans_per_body
                assert stats["requests_rejected"]["saturated"] == len(bodies) - 1 + len(grpc_bodies)
        finally:
            await locker.close()
