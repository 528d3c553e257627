"""Liveness, readiness and ingest figures."""

from __future__ import annotations

from litestar import Controller, Response, get
from litestar.di import NamedDependency

from faultfinder.server.api.schemas import Health, IngestStats
from faultfinder.server.ingest import SpanWriter
from faultfinder.server.otlp.pool import BodyDecoder
from faultfinder.server.store import SpanStore


class HealthController(Controller):
    tags = ("health",)

    @get("/healthz", operation_id="healthz", summary="The process is up")
    async def healthz(self) -> Health:
        return Health(status="ok")

    @get("/readyz", operation_id="readyz", summary="The database answers and takes writes")
    async def readyz(
        self, store: NamedDependency[SpanStore], writer: NamedDependency[SpanWriter]
    ) -> Response[Health]:
        failing = writer.failing
        if failing is not None:  # e.g. a read-only or full database: reads still answer
            return Response(
                Health(status="unavailable", details={"ingest": failing}), status_code=503
            )
        try:
            spans = await store.count_spans()
        except Exception as exc:  # readiness reports any database failure
            return Response(
                Health(status="unavailable", details={"database": str(exc)}), status_code=503
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
