"""Online auditing: score the steps of runs that are still running and raise early alarms.

The daemon looks at running runs whose span count changed, assembles their prefix,
and feeds it to the learned model's prefix-only `Auditor`. The first step above the
threshold becomes an alarm (one per run), stored, counted and announced before the
run ends.

The event loop also serves ingest, so a pass keeps its share of it small: the spans of
the changed runs are read in a few batched queries, assembling and scoring (pure CPU,
most of a pass) run in one worker thread, and the pass's alarms are stored in one
statement per batch. Runs that already raised their alarm are not read again. The GIL
still lets only one thread run Python at a time, so under a flood of new runs the
auditor rests between batches (`busy_share`) and leaves the rest of the process's time
to ingest: it then audits fewer of the runs, later, rather than slowing ingest down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import anyio
import anyio.to_thread

from faultfinder.attributors.auditor import Alarm, Auditor
from faultfinder.reading.model import SpanRecord
from faultfinder.server.daemon import PeriodicDaemon
from faultfinder.server.db.models import RunStatus
from faultfinder.server.store import AlarmStore, RunRow, SpanStore
from faultfinder.server.trajectories import run_trajectory

log = logging.getLogger(__name__)

OnAlarm = Callable[[Alarm], Awaitable[None]]

AUDIT_BATCH_RUNS = 100
"""Most runs read, scored and stored together."""
AUDIT_BATCH_SPANS = 20_000
"""Most spans read at once (a batch closes early at this many): with the runs' own limit
below, what one pass holds in memory is bounded whatever the runs' sizes."""
AUDIT_MAX_SPANS_PER_RUN = 2_000
"""Runs with more spans are no longer audited, and their state is dropped: an early alarm
is for a run's early steps, and the auditor keeps each audited run's steps, so this bounds
its memory per run (and, with `max_runs`, in total)."""
AUDIT_BUSY_SHARE = 0.5
"""Most of the wall-clock time a pass spends auditing; it rests for the remainder."""


@dataclass(frozen=True)
class AuditLimits:
    """How much of the process one auditor pass may take (the constants above)."""

    max_runs: int = 500
    """Running runs looked at per pass (the most recently created)."""
    batch_runs: int = AUDIT_BATCH_RUNS
    batch_spans: int = AUDIT_BATCH_SPANS
    max_spans_per_run: int = AUDIT_MAX_SPANS_PER_RUN
    busy_share: float = AUDIT_BUSY_SHARE


class OnlineAuditor(PeriodicDaemon):
    """Daemon: audit running runs as their spans arrive; `async with OnlineAuditor(...)`."""

    name = "faultfinder-auditor"

    def __init__(
        self,
        store: SpanStore,
        alarms: AlarmStore,
        *,
        auditor: Auditor | None = None,
        interval: float = 1.0,
        on_alarm: OnAlarm | None = None,
        limits: AuditLimits | None = None,
    ) -> None:
        limits = limits or AuditLimits()
        if not 0 < limits.busy_share <= 1:
            raise ValueError(f"busy_share must be in (0, 1], not {limits.busy_share}")
        super().__init__(interval)
        self._store = store
        self._alarms = alarms
        self._auditor = auditor
        self._on_alarm = on_alarm
        self._max_runs = limits.max_runs
        self._batch_runs = limits.batch_runs
        self._batch_spans = limits.batch_spans
        self._max_spans_per_run = limits.max_spans_per_run
        self._rest_per_busy = 1 / limits.busy_share - 1
        self.runs_too_large = 0
        """Runs left unaudited for having more than `max_spans_per_run` spans."""
        self._seen: dict[str, int] = {}
        self._limiter: anyio.CapacityLimiter | None = None

    async def start(self) -> None:
        if self._auditor is None:
            self._auditor = await asyncio.to_thread(Auditor)
        await super().start()

    async def tick(self) -> None:
        await self.audit_once()

    async def audit_once(self) -> list[Alarm]:
        """One pass over running runs whose span count changed; returns new alarms.

        Also usable without starting the daemon (given an `auditor`)."""
        assert self._auditor is not None
        rows, _ = await self._store.list_runs(status=RunStatus.RUNNING.value, limit=self._max_runs)
        running = {row.id: row for row in rows}
        for run_id in set(self._seen) - set(running):
            self._seen.pop(run_id, None)
            self._auditor.forget(run_id)
        changed = []
        for row in rows:
            if self._seen.get(row.id) == row.n_spans:
                continue
            if self._auditor.alarm_once and self._auditor.alarm(row.id) is not None:
                # Its one alarm is raised: new steps cannot raise another.
                self._seen[row.id] = row.n_spans
                continue
            if row.n_spans > self._max_spans_per_run:
                self._seen[row.id] = row.n_spans
                self._auditor.forget(row.id)
                self.runs_too_large += 1
                continue
            changed.append(row)
        raised: list[Alarm] = []
        for batch in self._batches(changed):
            began = time.monotonic()
            raised.extend(await self._audit_batch(batch))
            if self._rest_per_busy:
                await asyncio.sleep((time.monotonic() - began) * self._rest_per_busy)
        return raised

    def _batches(self, rows: Sequence[RunRow]) -> list[list[RunRow]]:
        """`rows` in batches of at most `batch_runs` runs and (but for a batch of one run)
        `batch_spans` spans."""
        batches: list[list[RunRow]] = []
        spans = 0
        for row in rows:
            if (
                not batches
                or len(batches[-1]) >= self._batch_runs
                or spans + row.n_spans > self._batch_spans
            ):
                batches.append([])
                spans = 0
            batches[-1].append(row)
            spans += row.n_spans
        return batches

    async def _audit_batch(self, rows: Sequence[RunRow]) -> list[Alarm]:
        if self._limiter is None:
            # One scoring thread: the `Auditor`'s per-run state is not shared between
            # threads, and more threads would only contend for the GIL with the event loop.
            self._limiter = anyio.CapacityLimiter(1)
        spans = await self._store.spans_of_runs([row.id for row in rows])
        found = await anyio.to_thread.run_sync(
            self._score, [(row, spans.get(row.id, [])) for row in rows], limiter=self._limiter
        )
        # Marked seen only once scored: a pass that fails before this retries the runs.
        for row in rows:
            self._seen[row.id] = row.n_spans
        raised = await self._alarms.add_many(found)
        for alarm in raised:
            log.info("early alarm on run %s: step %d (%s)", alarm.run_id, alarm.step, alarm.agent)
            if self._on_alarm is not None:
                await self._on_alarm(alarm)
        return raised

    def _score(self, runs: Sequence[tuple[RunRow, Sequence[SpanRecord]]]) -> list[Alarm]:
        """Assemble and score each run's prefix (worker thread; pure CPU)."""
        assert self._auditor is not None
        alarms = []
        for row, spans in runs:
            alarm = self._auditor.observe(run_trajectory(row.id, spans, row))
            if alarm is not None:
                alarms.append(alarm)
        return alarms
