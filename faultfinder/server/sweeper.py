"""The lifecycle's daemon: every `sweep_interval` seconds it settles the runs that are due
(`lifecycle.sweep`), announces each status change on the event bus and queues the jobs
of the runs that failed."""

from __future__ import annotations

import logging
import time

from faultfinder.server.daemon import PeriodicDaemon
from faultfinder.server.events import RUN_STATUS, EventBus
from faultfinder.server.lifecycle import RunTransition, sweep
from faultfinder.server.settings import Settings
from faultfinder.server.store import JobQueue, SpanStore

__all__ = ["LifecycleSweeper"]

log = logging.getLogger(__name__)


class LifecycleSweeper(PeriodicDaemon):
    """Daemon: turns quiet runs complete or failed, and gives failed runs their jobs."""

    name = "faultfinder-lifecycle"

    def __init__(
        self, store: SpanStore, jobs: JobQueue, settings: Settings, events: EventBus
    ) -> None:
        super().__init__(settings.sweep_interval)
        self._store = store
        self._jobs = jobs
        self._settings = settings
        self._events = events

    async def tick(self) -> None:
        transitions = await sweep(
            self._store,
            now=time.time(),
            quiet_period_s=self._settings.quiet_period,
            unfinished_after_s=self._settings.unfinished_after,
        )
        await self._announce(transitions)

    async def settle(self, run_id: str) -> None:
        """Apply the lifecycle to one run now (an outcome was just posted for it), and give
        it its jobs if it failed, instead of waiting for the next sweep."""
        transitions = await sweep(
            self._store,
            now=time.time(),
            quiet_period_s=self._settings.quiet_period,
            unfinished_after_s=self._settings.unfinished_after,
            only=run_id,
        )
        await self._announce(transitions)

    async def _announce(self, transitions: list[RunTransition]) -> None:
        for transition in transitions:
            log.info("run %s is now %s", transition.run_id, transition.status)
            self._events.publish(
                RUN_STATUS,
                {
                    "run_id": transition.run_id,
                    "previous": transition.previous.value,
                    "status": transition.status.value,
                },
            )
        await self._jobs.enqueue_for_failed_runs(self._settings.attributors)
