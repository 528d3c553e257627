"""The composition root: what each kind of sidecar process is built from, built once.

Three kinds of process run the sidecar, and all three start here:

- `serve` (`app.py`, the app factory): the receivers, API and daemons around a `Service`;
- `worker` (`worker_main.py`): attribution workers without the HTTP server;
- `auditor` (`audit_process.py`): the online auditor in a process of its own.

`Composition(settings, kind)` loads the attributor plugins (serve and worker), and
`await composition.open()` migrates the database when asked (serve and worker), connects,
and builds the store's owners, the learned model and the attribution service, each in
one place. The rest of the process wires the `Service` it gets, so no two processes
build the same thing two ways.
"""

from __future__ import annotations

import asyncio
import enum
import importlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from faultfinder.attributors.auditor import Auditor
from faultfinder.attributors.base import PluginError, available_attributors, load_entry_points
from faultfinder.attributors.learned import StepModel
from faultfinder.server.settings import Settings, SettingsError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faultfinder.attributors.context import AttributorContext
    from faultfinder.attributors.model import Attribution
    from faultfinder.server.attribution import (
        AttributionService,
        AttributionWorker,
        OnAttribution,
    )
    from faultfinder.server.audit import OnAlarm, OnlineAuditor
    from faultfinder.server.store import AlarmStore, JobQueue, SpanStore
    from faultfinder.server.webhooks import WebhookSender

__all__ = [
    "Composition",
    "ProcessKind",
    "Service",
    "attributor_context_for",
    "auditor_for",
    "learned_model_for",
    "load_plugins",
    "online_auditor_for",
    "publish_attribution",
    "span_store_for",
]

log = logging.getLogger(__name__)


class ProcessKind(enum.Enum):
    """The kinds of sidecar process, each composed here."""

    SERVE = "serve"
    WORKER = "worker"
    AUDITOR = "auditor"

    @property
    def attributes(self) -> bool:
        """Whether the process runs attributors (and so loads their plugins, migrates the
        database it writes attributions to, and builds the attribution service)."""
        return self is not ProcessKind.AUDITOR


@dataclass(frozen=True)
class Service:
    """What one process runs on: the database engine, each table's owner, the learned
    model, and (serve and worker) the attribution service. `aclose` ends them."""

    settings: Settings
    kind: ProcessKind
    engine: AsyncEngine
    store: SpanStore
    jobs: JobQueue
    alarms: AlarmStore
    learned_model: StepModel | None
    attribution: AttributionService | None

    def webhooks(self) -> WebhookSender:
        """The webhook sender of `FAULTFINDER_WEBHOOK_URLS` (a daemon: `async with`)."""
        from faultfinder.server.webhooks import WebhookSender

        settings = self.settings
        return WebhookSender(settings.webhook_urls, secret=settings.webhook_secret)

    def attribution_worker(self, *, on_attribution: OnAttribution | None) -> AttributionWorker:
        """The attribution worker daemon: `FAULTFINDER_WORKERS` slots for the jobs of
        attributors that ask a model (a worker process runs at least one; `serve` none when
        it is 0, see `runs_workers`) and `FAULTFINDER_FAST_WORKERS` for the zero-LLM ones."""
        from faultfinder.server.attribution import AttributionWorker, Slots

        assert self.attribution is not None, "the auditor process attributes nothing"
        settings = self.settings
        return AttributionWorker(
            self.attribution,
            self.jobs,
            slots=Slots(model=max(1, settings.workers), zero_llm=settings.fast_workers),
            lease_s=settings.job_lease,
            auto_attributors=tuple(settings.attributors),
            on_attribution=on_attribution,
        )

    def online_auditor(self, *, on_alarm: OnAlarm | None) -> OnlineAuditor:
        """The online auditor daemon over this process's store and alarms."""
        return online_auditor_for(
            self.settings, self.store, self.alarms, self.learned_model, on_alarm=on_alarm
        )

    async def aclose(self) -> None:
        """Close the attributors' connections and the store's threads, then the engine."""
        if self.attribution is not None:
            await self.attribution.aclose()
        await self.store.aclose()
        await self.engine.dispose()


class Composition:
    """How one kind of process is built from `settings`; plugins load on construction, so
    an unknown attributor is a `SettingsError` before anything starts."""

    def __init__(self, settings: Settings, kind: ProcessKind) -> None:
        self.settings = settings
        self.kind = kind
        if kind.attributes:
            load_plugins(settings)

    async def open(self) -> Service:
        """Migrate (serve and worker, when `FAULTFINDER_MIGRATE_ON_START`), connect and build."""
        from faultfinder.server.attribution import AttributionService
        from faultfinder.server.db.engine import create_engine
        from faultfinder.server.db.migrate import upgrade
        from faultfinder.server.store import AlarmStore, JobQueue

        settings, kind = self.settings, self.kind
        if kind.attributes and settings.migrate_on_start:
            await asyncio.to_thread(upgrade, settings.database_url, show_progress=False)
        engine = create_engine(settings.database_url)
        store = span_store_for(engine, settings)
        learned_model = await asyncio.to_thread(learned_model_for, settings)
        attribution = (
            AttributionService(
                store,
                context=attributor_context_for(settings, learned_model),
                timeout_s=settings.attribution_timeout,
            )
            if kind.attributes
            else None
        )
        return Service(
            settings=settings,
            kind=kind,
            engine=engine,
            store=store,
            jobs=JobQueue(
                engine,
                max_attempts=settings.job_max_attempts,
                backoff_s=settings.job_backoff,
                record_attribution=store.record_attribution,
            ),
            alarms=AlarmStore(engine),
            learned_model=learned_model,
            attribution=attribution,
        )


def span_store_for(engine: AsyncEngine, settings: Settings | None = None) -> SpanStore:
    """The span store on `engine`, shaped by `settings` (the span cap per run); without
    settings, a store with the defaults (benchmarks, drills)."""
    from faultfinder.server.store import SpanStore

    if settings is None:
        return SpanStore(engine)
    return SpanStore(
        engine,
        max_spans_per_run=settings.max_spans_per_run,
    )


def publish_attribution(webhooks: WebhookSender, run_id: str | None, result: Attribution) -> None:
    """Tell the webhooks about a stored attribution (`attribution.created`)."""
    webhooks.publish(
        "attribution.created",
        {"run_id": run_id, "attribution": result.model_dump(mode="json")},
    )


def load_plugins(settings: Settings) -> None:
    """Import attributor plugins (the modules of `FAULTFINDER_PLUGINS` and the entry points
    of installed packages) and check every configured attributor exists."""
    for module in settings.plugins:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise SettingsError(
                f"plugins (FAULTFINDER_PLUGINS): cannot import {module!r}: {exc}"
            ) from None
    try:
        load_entry_points()
    except PluginError as exc:
        raise SettingsError(str(exc)) from None
    unknown = [name for name in settings.attributors if name not in available_attributors()]
    if unknown:
        raise SettingsError(
            f"attributors (FAULTFINDER_ATTRIBUTORS): unknown {', '.join(map(repr, unknown))}; "
            f"available: {', '.join(available_attributors())}"
        )


def learned_model_for(settings: Settings) -> StepModel | None:
    """The model of `FAULTFINDER_LEARNED_MODEL`, or None for the packaged one."""
    if settings.learned_model is None:
        return None
    return StepModel.load(settings.learned_model)


def auditor_for(learned_model: StepModel | None) -> Auditor | None:
    """The online auditor of `FAULTFINDER_LEARNED_MODEL`; None (the packaged one) when
    that model has no prefix-only auditor model (one fitted without `faultfinder train`)."""
    if learned_model is None:
        return None
    if learned_model.auditor is None or learned_model.auditor.alarm_threshold is None:
        log.warning("the learned model has no auditor model; early alarms use the packaged model's")
        return None
    return Auditor(learned_model)


def attributor_context_for(
    settings: Settings, learned_model: StepModel | None
) -> AttributorContext:
    """What every attributor is built with: the model endpoint of the LLM methods (one
    shared connection per endpoint), the pre-filter depth and the learned model
    (`learned_model_for(settings)`; None: the packaged one). The service that is given it
    closes it when it stops."""
    from faultfinder.attributors.context import AttributorContext
    from faultfinder.attributors.llm import ModelSettings

    given = {
        "base_url": settings.llm_base_url,
        "api_key": settings.llm_api_key,
        "model": settings.llm_model,
        "timeout": settings.llm_timeout,
        "concurrency": settings.llm_concurrency,
    }
    # Unset settings keep the model's own defaults.
    model = ModelSettings.model_validate(
        {name: value for name, value in given.items() if value is not None}
    )
    return AttributorContext(
        llm=model, prefilter_top_k=settings.llm_prefilter_top_k, learned_model=learned_model
    )


def online_auditor_for(
    settings: Settings,
    store: SpanStore,
    alarms: AlarmStore,
    learned_model: StepModel | None,
    *,
    on_alarm: OnAlarm | None,
) -> OnlineAuditor:
    """The online auditor daemon of `settings` (in the serving process, or in its own:
    `faultfinder/server/audit_process.py`)."""
    from faultfinder.server.audit import AuditLimits, OnlineAuditor

    return OnlineAuditor(
        store,
        alarms,
        auditor=auditor_for(learned_model),
        interval=settings.audit_interval,
        limits=AuditLimits(busy_share=settings.audit_busy_share),
        on_alarm=on_alarm,
    )
