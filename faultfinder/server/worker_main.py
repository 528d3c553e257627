"""`faultfinder worker`: attribution workers without the HTTP server."""

from __future__ import annotations

import asyncio
import logging
import signal

from faultfinder.attributors.model import Attribution
from faultfinder.server.attribution import AttributionService, AttributionWorker
from faultfinder.server.composition import (
    attributor_context_for,
    learned_model_for,
    load_plugins,
)
from faultfinder.server.db.engine import create_engine
from faultfinder.server.db.migrate import upgrade
from faultfinder.server.settings import Settings
from faultfinder.server.store import JobQueue, SpanStore
from faultfinder.server.webhooks import WebhookSender

log = logging.getLogger(__name__)


async def run_workers(settings: Settings) -> None:
    """Claim and run attribution jobs until SIGINT/SIGTERM."""
    load_plugins(settings)
    if settings.migrate_on_start:
        await asyncio.to_thread(upgrade, settings.database_url, show_progress=False)
    engine = create_engine(settings.database_url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    store = SpanStore(
        engine,
        group_by_conversation=settings.group_by_conversation,
        max_spans_per_run=settings.max_spans_per_run,
    )
    jobs = JobQueue(engine, max_attempts=settings.job_max_attempts, backoff_s=settings.job_backoff)
    learned_model = learned_model_for(settings)
    service = AttributionService(
        store,
        context=attributor_context_for(settings, learned_model),
        timeout_s=settings.attribution_timeout,
    )
    try:
        async with WebhookSender(settings.webhook_urls, secret=settings.webhook_secret) as hooks:

            async def announce(run_id: str | None, result: Attribution) -> None:
                hooks.publish(
                    "attribution.created",
                    {"run_id": run_id, "attribution": result.model_dump(mode="json")},
                )

            async with AttributionWorker(
                service,
                jobs,
                concurrency=max(1, settings.workers),
                lease_s=settings.job_lease,
                auto_attributors=tuple(settings.attributors),
                on_attribution=announce,
            ) as worker:
                log.info(
                    "worker %s running %d job slot(s)", worker.worker_id, max(1, settings.workers)
                )
                await stop.wait()
    finally:
        await service.aclose()
        await engine.dispose()
