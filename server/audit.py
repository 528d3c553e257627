"""Online auditing: score the steps of runs that are still running and raise early alarms.

The daemon looks at running runs whose span count changed, assembles their prefix,
and feeds it to the learned model's prefix-only `Auditor`. The first step above the
threshold becomes an alarm (one per run), stored, counted and announced before the
run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy import Table, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from faultfinder.attributors.auditor import Alarm, Auditor
from faultfinder.server.assembler import assemble_trajectory
from faultfinder.server.db.models import AlarmTable, RunStatus
from faultfinder.server.store import SpanStore

log = logging.getLogger(__name__)

ALARMS: Table = AlarmTable.__table__  # type: ignore[attr-defined]

OnAlarm = Callable[[Alarm], Awaitable[None]]


@dataclass(frozen=True)
class StoredAlarm:
    run_id: str
    step: int
    agent: str
    score: float
    threshold: float
    steps_seen: int
    created_at: float
    """Unix seconds."""


class AlarmStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert

    async def add(self, alarm: Alarm) -> bool:
        """Store the run's alarm; False when the run already has one (or is gone)."""
        values = {
            "run_id": alarm.run_id,
            "step": alarm.step,
            "agent": alarm.agent,
            "score": alarm.score,
            "threshold": alarm.threshold,
            "steps_seen": alarm.steps_seen,
            "created_at": time.time_ns(),
        }
        statement = self._insert(ALARMS).values(values).on_conflict_do_nothing()
        async with self._engine.begin() as conn:
            result = await conn.execute(statement.returning(ALARMS.c.id))
            return result.first() is not None

    async def for_runs(self, run_ids: list[str]) -> dict[str, StoredAlarm]:
        if not run_ids:
            return {}
        async with self._engine.connect() as conn:
            rows = await conn.execute(select(ALARMS).where(ALARMS.c.run_id.in_(run_ids)))
            return {row.run_id: _stored(row) for row in rows}

    async def recent(self, limit: int = 100) -> list[StoredAlarm]:
        async with self._engine.connect() as conn:
            rows = await conn.execute(select(ALARMS).order_by(ALARMS.c.id.desc()).limit(limit))
            return [_stored(row) for row in rows]


def _stored(row: object) -> StoredAlarm:
    mapping = row._mapping  # type: ignore[attr-defined]
    return StoredAlarm(
        run_id=mapping["run_id"],
        step=mapping["step"],
        agent=mapping["agent"],
        score=mapping["score"],
        threshold=mapping["threshold"],
        steps_seen=mapping["steps_seen"],
        created_at=mapping["created_at"] / 1e9,
    )


class OnlineAuditor:
    """Daemon: audit running runs as their spans arrive; `async with OnlineAuditor(...)`."""

    def __init__(
        self,
        store: SpanStore,
        alarms: AlarmStore,
        *,
        auditor: Auditor | None = None,
        interval: float = 1.0,
        on_alarm: OnAlarm | None = None,
        max_runs: int = 500,
    ) -> None:
        self._store = store
        self._alarms = alarms
        self._auditor = auditor
        self._interval = interval
        self._on_alarm = on_alarm
        self._max_runs = max_runs
        self._seen: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> OnlineAuditor:
        if self._auditor is None:
            self._auditor = await asyncio.to_thread(Auditor)
        self._task = asyncio.create_task(self._run(), name="faultfinder-auditor")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                await self.audit_once()
            except Exception:
                log.exception("auditing running runs failed; trying again")
            await asyncio.sleep(self._interval)

    async def audit_once(self) -> list[Alarm]:
        """One pass over running runs whose span count changed; returns new alarms."""
        assert self._auditor is not None
        rows, _ = await self._store.list_runs(status=RunStatus.RUNNING.value, limit=self._max_runs)
        running = {row.id: row for row in rows}
        for run_id in set(self._seen) - set(running):
            self._seen.pop(run_id, None)
            self._auditor.forget(run_id)
        raised = []
        for run_id, row in running.items():
            if self._seen.get(run_id) == row.n_spans:
                continue
            self._seen[run_id] = row.n_spans
            prefix = assemble_trajectory(run_id, await self._store.run_spans(run_id))
            alarm = self._auditor.observe(prefix)
            if alarm is not None and await self._alarms.add(alarm):
                raised.append(alarm)
                log.info("early alarm on run %s: step %d (%s)", run_id, alarm.step, alarm.agent)
                if self._on_alarm is not None:
                    await self._on_alarm(alarm)
        return raised
