"""The one app factory: every controller, plugin and daemon of the sidecar is wired here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from litestar import Litestar
from litestar.datastructures import State
from litestar.openapi.config import OpenAPIConfig
from litestar.plugins.problem_details import ProblemDetailsConfig, ProblemDetailsPlugin

from faultfinder import __version__
from faultfinder.server import lifecycle
from faultfinder.server.api.health import HealthController
from faultfinder.server.api.otlp import OtlpTraceController
from faultfinder.server.api.runs import RunController
from faultfinder.server.db.engine import create_engine
from faultfinder.server.db.migrate import upgrade
from faultfinder.server.grpc_receiver import GrpcReceiver
from faultfinder.server.ingest import SpanWriter
from faultfinder.server.runs import RunService
from faultfinder.server.settings import Settings, load_settings
from faultfinder.server.store import SpanStore

log = logging.getLogger(__name__)


class LifecycleSweeper:
    """Daemon: periodically turns quiet runs complete or failed."""

    def __init__(self, store: SpanStore, *, interval: float, quiet_period: float) -> None:
        self._store = store
        self._interval = interval
        self._quiet_period = quiet_period
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LifecycleSweeper:
        self._task = asyncio.create_task(self._run(), name="faultfinder-lifecycle")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                transitions = await lifecycle.sweep(
                    self._store, now=time.time(), quiet_period_s=self._quiet_period
                )
                for transition in transitions:
                    log.info("run %s is now %s", transition.run_id, transition.status)
            except Exception:
                log.exception("lifecycle sweep failed; trying again")
            await asyncio.sleep(self._interval)


def create_app(settings: Settings | None = None) -> Litestar:
    """Build the sidecar: OTLP receivers, API, ingest writer, lifecycle sweeper."""
    settings = settings or load_settings()

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        if settings.migrate_on_start:
            await asyncio.to_thread(upgrade, settings.database_url)
        engine = create_engine(settings.database_url)
        store = SpanStore(engine, group_by_conversation=settings.group_by_conversation)
        writer = SpanWriter(
            store.write_spans,
            max_queued_spans=settings.ingest_queue_spans,
            max_batch_spans=settings.ingest_batch_spans,
            ack_timeout=settings.ingest_ack_timeout,
        )
        app.state.update(store=store, writer=writer, runs=RunService(store))
        try:
            async with AsyncExitStack() as daemons:
                await daemons.enter_async_context(writer)
                if settings.grpc_enabled:
                    receiver = GrpcReceiver(
                        writer,
                        host=settings.host,
                        port=settings.grpc_port,
                        max_message_bytes=settings.max_decompressed_bytes,
                    )
                    await daemons.enter_async_context(receiver)
                    app.state.grpc_port = receiver.port
                await daemons.enter_async_context(
                    LifecycleSweeper(
                        store, interval=settings.sweep_interval, quiet_period=settings.quiet_period
                    )
                )
                yield
        finally:
            await engine.dispose()

    return Litestar(
        route_handlers=[OtlpTraceController, RunController, HealthController],
        lifespan=[lifespan],
        plugins=[ProblemDetailsPlugin(ProblemDetailsConfig(enable_for_all_http_exceptions=True))],
        openapi_config=OpenAPIConfig(title="faultfinder", version=__version__, path="/schema"),
        request_max_body_size=settings.max_request_bytes,
        state=State({"settings": settings}),
    )
