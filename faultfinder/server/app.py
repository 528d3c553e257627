"""The one app factory: every controller, plugin and daemon of the sidecar is wired here."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from litestar import Litestar, Request, Response
from litestar.datastructures import State
from litestar.middleware import DefineMiddleware
from litestar.openapi.config import OpenAPIConfig
from litestar.plugins.problem_details import ProblemDetailsConfig, ProblemDetailsPlugin
from litestar.types import Empty
from litestar.utils.scope.state import ScopeState

from faultfinder import __version__
from faultfinder.attributors.auditor import Alarm
from faultfinder.attributors.model import Attribution
from faultfinder.server.admission import IngestAdmission, SpansPerByte
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
from faultfinder.server.audit_process import AuditorProcess
from faultfinder.server.auth import KeyRing, require_key
from faultfinder.server.composition import Composition, ProcessKind, publish_attribution
from faultfinder.server.errors import ServerError, answer_for
from faultfinder.server.events import ATTRIBUTION, RUN_CHANGED, EventBus, announcing
from faultfinder.server.grpc_receiver import GrpcReceiver
from faultfinder.server.heap_trimmer import HeapTrimmer
from faultfinder.server.http_guard import BoundedJsonRequest, HttpGuard, served_hosts
from faultfinder.server.ingest import SpanWriter
from faultfinder.server.logs import flush_logs, logging_config
from faultfinder.server.metrics import ServerMetrics
from faultfinder.server.otlp.pool import BodyDecoder
from faultfinder.server.receiver import Receiver
from faultfinder.server.run_budget import RunSpanBudget
from faultfinder.server.runs import RunService
from faultfinder.server.settings import Settings, load_settings
from faultfinder.server.store import BenchHistory, LabelStore
from faultfinder.server.sweeper import LifecycleSweeper

log = logging.getLogger(__name__)

SWITCH_INTERVAL_S = 0.0005
"""Python's GIL switch interval while the sidecar serves (Python's default is 5 ms).

The SQLite driver runs each statement in a thread that gives up the GIL around every row
it steps through and must then take it back from the event loop. While the loop decodes
ingest requests, each take-back waited for up to the whole interval: 3.5-4.5 % of ingest
transactions took 0.25-0.5 s instead of ~40 ms, and they set the request p99. At 0.5 ms
at most 1 in ~500 did, the p99 fell by about 40 % and throughput rose by 15-25 %
(reports/reliability.md and ingest.md)."""


def server_error(request: Request[Any, Any, Any], exc: ServerError) -> Response[Any]:
    """A server error that reached the API (an unknown run is a 404 everywhere): Problem
    Details with the status `errors.ANSWERS` gives it. A 500 tells nothing more."""
    answer = answer_for(exc)
    problem: dict[str, Any] = {"status": answer.http_status, "title": answer.title}
    if answer.http_status < 500:
        problem["detail"] = str(exc)
    else:
        log.error("%s answering %s %s", type(exc).__name__, request.method, request.url.path)
    return Response(problem, status_code=answer.http_status, media_type="application/problem+json")


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
    composition = Composition(settings, ProcessKind.SERVE)  # loads the attributor plugins
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
        service = await composition.open()
        store, jobs, alarms = service.store, service.jobs, service.alarms
        writer = SpanWriter(
            announcing(store.write_spans, events),
            max_queued_spans=settings.ingest_queue_spans,
            max_batch_spans=settings.ingest_batch_spans,
            ack_timeout=settings.ingest_ack_timeout,
            budget=RunSpanBudget(settings.max_spans_per_run, max_bytes=settings.max_run_bytes),
        )
        metrics.attach(writer, queue_capacity=settings.ingest_queue_spans)
        webhooks = service.webhooks()

        async def announce(run_id: str | None, result: Attribution) -> None:
            publish_attribution(webhooks, run_id, result)
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

        async def raise_alarm(alarm: Alarm) -> None:
            payload = dataclasses.asdict(alarm)
            if payload["created_at"] is None:  # raised here, not read back: no stored time
                del payload["created_at"]
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
            bench_history=BenchHistory(service.engine),
            decoder=decoder,
            store=store,
            jobs=jobs,
            writer=writer,
            attribution=service.attribution,
            runs=RunService(store, jobs, LabelStore(service.engine), alarms, settle=sweeper.settle),
            ingest=IngestServices(
                settings,
                Receiver(
                    writer, admission, decoder, settings, spans_per_byte=admission.spans_per_byte
                ),
            ),
        )
        try:
            async with AsyncExitStack() as daemons:
                await decoder.start()
                daemons.push_async_callback(decoder.aclose)
                await daemons.enter_async_context(writer)
                await daemons.enter_async_context(webhooks)
                if settings.grpc_enabled:
                    # gRPC hands over bodies already inflated: it learns its own ratio.
                    grpc_intake = Receiver(
                        writer,
                        admission,
                        decoder,
                        settings,
                        spans_per_byte=SpansPerByte(initial=1 / 1000),
                    )
                    receiver = GrpcReceiver(grpc_intake, keys, settings)
                    await daemons.enter_async_context(receiver)
                    app.state.grpc_port = receiver.port
                await daemons.enter_async_context(sweeper)
                if settings.heap_trim_mb:
                    await daemons.enter_async_context(
                        HeapTrimmer(growth=settings.heap_trim_mb << 20)
                    )
                if settings.audit_in_process:
                    await daemons.enter_async_context(
                        AuditorProcess(settings, on_alarm=raise_alarm)
                    )
                elif settings.audit:
                    await daemons.enter_async_context(service.online_auditor(on_alarm=raise_alarm))
                if settings.workers:
                    worker = service.attribution_worker(on_attribution=announce)
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
            await service.aclose()
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
        # Unknown Host names and cross-site or non-JSON writes are refused before anything.
        middleware=[
            DefineMiddleware(
                HttpGuard, allowed_hosts=served_hosts(settings.allowed_hosts, settings.host)
            ),
            DashboardGate,
        ],
        request_class=BoundedJsonRequest,
        plugins=[ProblemDetailsPlugin(ProblemDetailsConfig(enable_for_all_http_exceptions=True))],
        # Services raise the server's errors (the store's UnknownRunError: 404); each is
        # answered from the one table in errors.py.
        exception_handlers={ServerError: server_error, RecursionError: nested_too_deeply},
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
