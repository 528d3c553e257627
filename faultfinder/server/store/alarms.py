"""Early alarms: at most one per run, raised by the online auditor while the run runs."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from faultfinder.attributors.auditor import Alarm
from faultfinder.server.store.tables import ALARMS, insert_for, now_ns

__all__ = ["AlarmStore"]


class AlarmStore:
    """The alarms table, rows to and from the domain's `Alarm` (its `created_at` is the
    row's, in Unix seconds)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._insert = insert_for(engine)

    async def add(self, alarm: Alarm) -> bool:
        """Store the run's alarm; False when the run already has one (or is gone)."""
        return bool(await self.add_many([alarm]))

    async def add_many(self, alarms: Sequence[Alarm]) -> list[Alarm]:
        """Store alarms (at most one per run) in one statement; returns those stored, in
        order. An alarm is skipped when its run already has one (or is gone)."""
        if not alarms:
            return []
        now = now_ns()
        values = [
            {
                "run_id": alarm.run_id,
                "step": alarm.step,
                "agent": alarm.agent,
                "score": alarm.score,
                "threshold": alarm.threshold,
                "steps_seen": alarm.steps_seen,
                "created_at": now,
                "reason": alarm.reason,
            }
            for alarm in alarms
        ]
        statement = (
            self._insert(ALARMS).values(values).on_conflict_do_nothing().returning(ALARMS.c.run_id)
        )
        async with self._engine.begin() as conn:
            stored = {row.run_id for row in await conn.execute(statement)}
        return [alarm for alarm in alarms if alarm.run_id in stored]

    async def for_runs(self, run_ids: list[str]) -> dict[str, Alarm]:
        if not run_ids:
            return {}
        async with self._engine.connect() as conn:
            rows = await conn.execute(select(ALARMS).where(ALARMS.c.run_id.in_(run_ids)))
            return {row.run_id: _alarm(row) for row in rows}

    async def recent(self, limit: int = 100) -> list[Alarm]:
        async with self._engine.connect() as conn:
            rows = await conn.execute(select(ALARMS).order_by(ALARMS.c.id.desc()).limit(limit))
            return [_alarm(row) for row in rows]


def _alarm(row: object) -> Alarm:
    mapping = row._mapping  # type: ignore[attr-defined]
    return Alarm(
        run_id=mapping["run_id"],
        step=mapping["step"],
        agent=mapping["agent"],
        score=mapping["score"],
        threshold=mapping["threshold"],
        steps_seen=mapping["steps_seen"],
        created_at=mapping["created_at"] / 1e9,
        reason=mapping["reason"] or "",  # alarms stored before reasons were have none
    )
