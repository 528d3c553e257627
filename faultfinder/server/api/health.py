"""Liveness, readiness and ingest figures."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get
from litestar.datastructures import State
from litestar.di import NamedDependency

from faultfinder.server.auth import KeyRing, presented_key
from faultfinder.server.ingest import SpanWriter
from faultfinder.server.otlp.pool import BodyDecoder
from faultfinder.server.schemas import Health, IngestStats
from faultfinder.server.store import SpanStore


class HealthController(Controller):
    tags = ("health",)

    @get("/healthz", operation_id="healthz", summary="The process is up")
    async def healthz(self) -> Health:
        return Health(status="ok")

    @get("/readyz", operation_id="readyz", summary="The database answers and takes writes")
    async def readyz(
        self,
        request: Request[Any, Any, State],
        store: NamedDependency[SpanStore],
        writer: NamedDependency[SpanWriter],
    ) -> Response[Health]:
        # Probes carry no key; the database's error text (paths, hosts, users) is for
        # those who may query the API.
        keys: KeyRing = request.app.state.keyring
        may_see = keys.may_query(
            presented_key(request.headers.get("authorization"), request.headers.get("x-api-key"))
        )
        failing = writer.failing
        if failing is not None:  # e.g. a read-only or full database: reads still answer
            detail = failing if may_see else "the database refuses writes"
            return Response(
                Health(status="unavailable", details={"ingest": detail}), status_code=503
            )
        try:
            spans = await store.count_spans()
        except Exception as exc:  # readiness reports any database failure
            detail = str(exc) if may_see else "the database does not answer"
            return Response(
                Health(status="unavailable", details={"database": detail}), status_code=503
            )
        return Response(Health(status="ok", details={"spans": spans}))

    @get(
        "/api/stats/ingest", operation_id="ingestStats", summary="Spans received, stored, rejected"
    )
    async def ingest_stats(
        self,
        writer: NamedDependency[SpanWriter],
        store: NamedDependency[SpanStore],
        decoder: NamedDependency[BodyDecoder],
    ) -> IngestStats:
        counters = writer.counters
        return IngestStats(
            spans_stored=await store.count_spans(),
            spans_received=counters.spans_received,
            spans_acknowledged=counters.spans_stored,
            queued_spans=writer.queued_spans,
            spans_rejected=dict(counters.spans_rejected),
            requests_rejected=dict(counters.requests_rejected),
            write_errors=counters.write_errors,
            batches_written=counters.batches_written,
            values_truncated=counters.values_truncated,
            decoder_pids=decoder.pids(),
            decoder_restarts=decoder.restarts,
        )
