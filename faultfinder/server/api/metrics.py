"""`GET /metrics`: the Prometheus exposition of the sidecar's counters and its database."""

from __future__ import annotations

from litestar import Controller, Response, get
from litestar.di import NamedDependency
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from faultfinder.server.metrics import ServerMetrics
from faultfinder.server.store import BenchHistory, JobQueue, SpanStore

__all__ = ["MetricsController"]


class MetricsController(Controller):
    tags = ("metrics",)

    @get(
        "/metrics",
        operation_id="metrics",
        summary="Prometheus metrics (text exposition format)",
        media_type=CONTENT_TYPE_LATEST,
    )
    async def metrics(
        self,
        metrics: NamedDependency[ServerMetrics],
        store: NamedDependency[SpanStore],
        jobs: NamedDependency[JobQueue],
        bench_history: NamedDependency[BenchHistory],
    ) -> Response[bytes]:
        await metrics.refresh(store, jobs, bench_history)
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
