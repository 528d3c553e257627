"""What `serve` and `worker` build alike from the settings: the attributor plugins, the
learned model, the attributors' context and configuration, and the online auditor's model.

The web app (`app.py`) and the worker process (`worker_main.py`) both start from here,
so neither borrows from the other.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING

from faultfinder.attributors.auditor import Auditor
from faultfinder.attributors.base import PluginError, available_attributors, load_entry_points
from faultfinder.attributors.learned import StepModel
from faultfinder.server.settings import Settings, SettingsError

if TYPE_CHECKING:
    from faultfinder.attributors.context import AttributorContext
    from faultfinder.server.audit import OnAlarm, OnlineAuditor
    from faultfinder.server.store import AlarmStore, SpanStore

__all__ = [
    "attributor_context_for",
    "auditor_for",
    "learned_model_for",
    "load_plugins",
    "online_auditor_for",
]

log = logging.getLogger(__name__)


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
