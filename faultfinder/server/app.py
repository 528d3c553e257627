"""The one app factory: every controller, plugin and daemon of the sidecar is wired here."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from litestar import Litestar, Request, Response
from litestar.datastructures import State
from litestar.exceptions import NotFoundException
from litestar.openapi.config import OpenAPIConfig
from litestar.plugins.problem_details import ProblemDetailsConfig, ProblemDetailsPlugin
from litestar.types import Empty
from litestar.utils.scope.state import ScopeState

from faultfinder import __version__
from faultfinder.attributors.auditor import Alarm
from faultfinder.attributors.model import Attribution
from faultfinder.server.admission import IngestAdmission
from faultfinder.server.api.alarms import AlarmController
from faultfinder.server.api.attribute import AttributeController
from faultfinder.server.api.dashboard import (
    DashboardController,
    DashboardGate,
    dashboard_static_files,
    dashboard_templates,
)
from faultfinder.server.api.dependencies import DEPENDENCIES
from faultfinder.server.api.health import HealthController
from faultfinder.server.api.metrics import MetricsController
from faultfinder.server.api.otlp import IngestServices, OtlpLogsController, OtlpTraceController
from faultfinder.server.api.run_paths import EncodedRunIds
from faultfinder.server.api.runs import RunController
from faultfinder.server.api.stats import StatsController
from faultfinder.server.attribution import AttributionService, AttributionWorker
from faultfinder.server.audit_process import AuditorProcess
from faultfinder.server.auth import KeyRing, require_key
from faultfinder.server.composition import (
    attributor_context_for,
    learned_model_for,
    load_plugins,
    online_auditor_for,
)
from faultfinder.server.db.engine import create_engine
from faultfinder.server.db.migrate import upgrade
from faultfinder.server.events import ATTRIBUTION, RUN_CHANGED, EventBus, announcing
from faultfinder.server.grpc_receiver import GrpcReceiver
from faultfinder.server.ingest import SpanWriter
from faultfinder.server.logs import flush_logs, logging_config
from faultfinder.server.metrics import ServerMetrics
from faultfinder.server.otlp.mapping import run_id_of
from faultfinder.server.otlp.pool import BodyDecoder
from faultfinder.server.run_budget import RunSpanBudget
from faultfinder.server.runs import RunService
from faultfinder.server.settings import Settings, load_settings
from faultfinder.server.store import (
    AlarmStore,
    BenchHistory,
    JobQueue,
    LabelStore,
    SpanStore,
    UnknownRunError,
)
from faultfinder.server.sweeper import LifecycleSweeper
from faultfinder.server.webhooks import WebhookSender

log = logging.getLogger(__name__)

SWITCH_INTERVAL_S = 0.0005
"""Python's GIL switch interval while the sidecar serves (Python's default is 5 ms).

The SQLite driver runs each statement in a thread that gives up the GIL around every row
it steps through and must then take it back from the event loop. While the loop decodes
ingest requests, each take-back waited for up to the whole interval: 3.5-4.5 % of ingest
transactions took 0.25-0.5 s instead of ~40 ms, and they set the request p99. At 0.5 ms
at most 1 in ~500 did, the p99 fell by about 40 % and throughput rose by 15-25 %
(reports/reliability.md and ingest.md)."""


def unknown_run(request: Request[Any, Any, Any], exc: UnknownRunError) -> Response[Any]:
    problem = NotFoundException(str(exc))
    return Response(
        {"status": 404, "title": "Not Found", "detail": str(exc)},
        status_code=problem.status_code,
        media_type="application/problem+json",
    )


def nested_too_deeply(request: Request[Any, Any, Any], exc: RecursionError) -> Response[Any]:
    """A JSON body nested deeper than the decoder recurses (`[[[[…]]]]`, 10^3 levels and
    more) is the client's error: 400. A recursion anywhere else stays a server error."""
    if ScopeState.from_scope(request.scope).json is not Empty:
        log.error("recursion error answering %s %s", request.method, request.url.path)
        return Response(
            {"status": 500, "title": "Internal Server Error"},
            status_code=500,
            media_type="application/problem+json",
        )
    return Response(
        {"status": 400, "title": "Bad Request", "detail": "the JSON body is nested too deeply"},
        status_code=400,
        media_type="application/problem+json",
    )


def create_app(settings: Settings | None = None) -> Litestar:
    """Build the sidecar: OTLP receivers, API, ingest writer, lifecycle, attribution worker."""
    settings = settings or load_settings()
    load_plugins(settings)
    keys = KeyRing(settings.api_keys, settings.ingest_keys)
    events = EventBus()  # what the dashboard's live updates listen to
    metrics = ServerMetrics()
    if not keys.enabled and not settings.is_loopback:
        log.warning(
            "listening on %s without API keys: anyone who can reach it may send spans and "
            "read runs; set FAULTFINDER_API_KEYS",
            settings.host,
        )

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        if settings.migrate_on_start:
            await asyncio.to_thread(upgrade, settings.database_url, show_progress=False)
        engine = create_engine(settings.database_url)
        store = SpanStore(
            engine,
            group_by_conversation=settings.group_by_conversation,
            max_spans_per_run=settings.max_spans_per_run,
        )
        jobs = JobQueue(
            engine, max_attempts=settings.job_max_attempts, backoff_s=settings.job_backoff
        )
        writer = SpanWriter(
            announcing(
                store.write_spans, events, group_by_conversation=settings.group_by_conversation
            ),
            max_queued_spans=settings.ingest_queue_spans,
            max_batch_spans=settings.ingest_batch_spans,
            ack_timeout=settings.ingest_ack_timeout,
            budget=RunSpanBudget(
                settings.max_spans_per_run,
                functools.partial(run_id_of, group_by_conversation=settings.group_by_conversation),
            ),
        )
        metrics.attach(writer, queue_capacity=settings.ingest_queue_spans)
        learned_model = await asyncio.to_thread(learned_model_for, settings)
        attribution = AttributionService(
            store,
            context=attributor_context_for(settings, learned_model),
            timeout_s=settings.attribution_timeout,
        )
        webhooks = WebhookSender(settings.webhook_urls, secret=settings.webhook_secret)

        async def announce(run_id: str | None, result: Attribution) -> None:
            webhooks.publish(
                "attribution.created",
                {"run_id": run_id, "attribution": result.model_dump(mode="json")},
            )
            metrics.observe_attribution(result)
            events.publish(
                ATTRIBUTION,
                {
                    "run_id": run_id,
                    "method": result.method,
                    "status": result.status.value,
                    "agent": result.agent,
                    "step": result.step,
                },
            )

        alarms = AlarmStore(engine)

        async def raise_alarm(alarm: Alarm) -> None:
            payload = dataclasses.asdict(alarm)
            webhooks.publish("alarm.raised", payload)
            metrics.alarms.labels(alarm.agent).inc()
            events.publish(RUN_CHANGED, {"run_id": alarm.run_id})

        decoder = BodyDecoder(settings.decoder_processes)
        switch_interval = sys.getswitchinterval()
        sweeper = LifecycleSweeper(store, jobs, settings, events)
        # One admission for both receivers: refusals on either count as senders waiting,
        # acknowledgements on either as the rate ingest takes them.
        admission = IngestAdmission(
            settings.ingest_inflight_bytes, settings.retry_after, settings.retry_after_max
        )
        app.state.update(
            alarms=alarms,
            bench_history=BenchHistory(engine),
            decoder=decoder,
            store=store,
            jobs=jobs,
            writer=writer,
            attribution=attribution,
            runs=RunService(store, jobs, LabelStore(engine), alarms, settle=sweeper.settle),
            ingest=IngestServices(settings, writer, admission, decoder),
        )
        try:
            async with AsyncExitStack() as daemons:
                await decoder.start()
                daemons.push_async_callback(decoder.aclose)
                await daemons.enter_async_context(writer)
                await daemons.enter_async_context(webhooks)
                if settings.grpc_enabled:
                    receiver = GrpcReceiver(writer, keys, admission, settings)
                    await daemons.enter_async_context(receiver)
                    app.state.grpc_port = receiver.port
                await daemons.enter_async_context(sweeper)
                if settings.audit_in_process:
                    await daemons.enter_async_context(
                        AuditorProcess(settings, on_alarm=raise_alarm)
                    )
                elif settings.audit:
                    await daemons.enter_async_context(
                        online_auditor_for(
                            settings, store, alarms, learned_model, on_alarm=raise_alarm
                        )
                    )
                if settings.workers:
                    worker = AttributionWorker(
                        attribution,
                        jobs,
                        concurrency=settings.workers,
                        lease_s=settings.job_lease,
                        auto_attributors=tuple(settings.attributors),
                        on_attribution=announce,
                    )
                    # A failed run's jobs start when they are queued, not at the next poll.
                    jobs.on_enqueue(worker.wake)
                    await daemons.enter_async_context(worker)
                # What start-up built (modules, routes, the engine) lives as long as the
                # server. Frozen, it is no longer walked by every full collection, which
                # halves those pauses under ingest (median 145-153 -> 51-76 ms; see
                # reports/reliability.md).
                gc.collect()
                gc.freeze()
                sys.setswitchinterval(SWITCH_INTERVAL_S)
                yield
        finally:
            sys.setswitchinterval(switch_interval)
            gc.unfreeze()
            events.close()
            await attribution.aclose()
            await store.aclose()
            await engine.dispose()
            await asyncio.to_thread(flush_logs)

    app = Litestar(
        dependencies=DEPENDENCIES,
        route_handlers=[
            OtlpTraceController,
            OtlpLogsController,
            RunController,
            AttributeController,
            AlarmController,
            StatsController,
            HealthController,
            MetricsController,
            DashboardController,
            dashboard_static_files(),
        ],
        lifespan=[lifespan],
        guards=[require_key],
        middleware=[DashboardGate],
        plugins=[ProblemDetailsPlugin(ProblemDetailsConfig(enable_for_all_http_exceptions=True))],
        # Services raise the store's UnknownRunError; it is a 404 everywhere, mapped once.
        exception_handlers={UnknownRunError: unknown_run, RecursionError: nested_too_deeply},
        template_config=dashboard_templates(),
        logging_config=logging_config(),
        openapi_config=OpenAPIConfig(title="faultfinder", version=__version__, path="/schema"),
        request_max_body_size=settings.max_request_bytes,
        state=State(
            {
                "settings": settings,
                "keyring": keys,
                "events": events,
                "metrics": metrics,
            }
        ),
    )
    # Run ids may hold any character: the router sees their segment still encoded.
    app.asgi_handler = EncodedRunIds(app.asgi_handler)
    return app
