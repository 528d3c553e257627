"""Overload: when the store stalls, ingest answers 503 with Retry-After and loses nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import httpx
from sqlalchemy.engine import make_url

from tests.integration.sidecar import running_sidecar
from tests.otlp_helpers import framework_spans, protobuf_body

PROTOBUF = {"content-type": "application/x-protobuf"}


async def test_a_stalled_store_gets_503_with_retry_after_then_recovers(
    postgres_database_url: str, tmp_path: Path
) -> None:
    bodies = [protobuf_body(framework_spans()) for _ in range(6)]
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
                # At least the configured wait; more as senders pile up behind a store
                # that takes nothing.
                waits = [int(r.headers["retry-after"]) for r in refused]
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
                stats = (await client.get("/api/stats/ingest")).json()
                assert stats["spans_stored"] == len(bodies) * spans_per_body
                assert stats["requests_rejected"]["saturated"] == len(bodies) - 1
        finally:
            await locker.close()
