"""The nightly benchmark's history: suite runs (`bench_runs`) and their scored entries
(`bench_history`), which `faultfinder bench nightly` writes and the dashboard, `/metrics`
and `faultfinder bench history` read."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row, func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from faultfinder.server.db.models import BenchVerdict
from faultfinder.server.errors import UnknownBenchEntryError
from faultfinder.server.store.tables import BENCH_HISTORY, BENCH_RUNS, insert_for, now_ns

__all__ = ["BenchEntry", "BenchHistory", "BenchRun", "BenchVerdict", "UnknownBenchEntryError"]


@dataclass(frozen=True)
class BenchRun:
    """One run of a nightly suite."""

    id: str
    suite: str
    digest: str
    code_version: str
    plan: list[dict[str, Any]]
    started_at: int
    """Unix ns."""
    finished_at: int | None = None

    @property
    def planned(self) -> list[str]:
        """The entries the run scores (not the skipped ones), in order."""
        return [str(item["entry"]) for item in self.plan if not item.get("skipped")]


@dataclass(frozen=True)
class BenchEntry:
    """One scored (dataset, attributor, settings) entry of a suite run."""

    run_id: str
    entry: str
    dataset: str
    attributor: str
    settings: str
    method: str
    code_version: str
    model: str | None
    started_at: int
    """Unix ns."""
    created_at: int
    """Unix ns."""
    wall_time_s: float
    n_records: int
    agent_accuracy: float
    step_accuracy: float
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    figures: dict[str, Any]
    verdict: str
    accepted: bool
    records: list[dict[str, Any]] = field(default_factory=list)
    """Empty when read without them (`with_records=False`)."""
    definition: dict[str, Any] = field(default_factory=dict)
    baseline_id: int | None = None
    gate: dict[str, Any] | None = None
    id: int | None = None
    """Set once stored."""

    @property
    def regression(self) -> bool:
        return self.verdict == BenchVerdict.REGRESSION

    def as_json(self) -> dict[str, Any]:
        """The entry as one JSON Lines record (times also as ISO 8601, UTC)."""
        data = dataclasses.asdict(self)
        for name in ("started_at", "created_at"):
            data[f"{name}_iso"] = datetime.fromtimestamp(data[name] / 1e9, UTC).isoformat()
        return data


_SUMMARY_COLUMNS = [column for column in BENCH_HISTORY.c if column.name != "records"]
"""Every column but the per-record results (the bulk of a row)."""


class BenchHistory:
    """Suite runs and their entries; entries of one run are stored once each."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._insert = insert_for(engine)

    # --- suite runs ---------------------------------------------------------------------

    async def start_run(self, run: BenchRun) -> BenchRun:
        """Store `run` unless a run with its id exists; returns the stored run."""
        values = dataclasses.asdict(run)
        async with self._engine.begin() as conn:
            await conn.execute(self._insert(BENCH_RUNS).values(values).on_conflict_do_nothing())
        stored = await self.get_run(run.id)
        assert stored is not None
        return stored

    async def get_run(self, run_id: str) -> BenchRun | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(BENCH_RUNS).where(BENCH_RUNS.c.id == run_id))).first()
        return BenchRun(**row._mapping) if row is not None else None

    async def unfinished_run(
        self, suite: str, *, digest: str, code_version: str, since_ns: int
    ) -> BenchRun | None:
        """The newest run of `suite` started after `since_ns` that has not finished, made
        with the same suite and code."""
        statement = (
            select(BENCH_RUNS)
            .where(
                BENCH_RUNS.c.suite == suite,
                BENCH_RUNS.c.digest == digest,
                BENCH_RUNS.c.code_version == code_version,
                BENCH_RUNS.c.finished_at.is_(None),
                BENCH_RUNS.c.started_at >= since_ns,
            )
            .order_by(BENCH_RUNS.c.started_at.desc())
            .limit(1)
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(statement)).first()
        return BenchRun(**row._mapping) if row is not None else None

    async def finish_run(self, run_id: str) -> None:
        statement = (
            update(BENCH_RUNS)
            .where(BENCH_RUNS.c.id == run_id, BENCH_RUNS.c.finished_at.is_(None))
            .values(finished_at=now_ns())
        )
        async with self._engine.begin() as conn:
            await conn.execute(statement)

    async def recent_runs(self, limit: int = 10) -> list[BenchRun]:
        statement = select(BENCH_RUNS).order_by(BENCH_RUNS.c.started_at.desc()).limit(limit)
        async with self._engine.connect() as conn:
            return [BenchRun(**row._mapping) for row in await conn.execute(statement)]

    # --- entries ------------------------------------------------------------------------

    async def add_entry(self, entry: BenchEntry) -> BenchEntry | None:
        """Store `entry`; None (nothing stored) when its run holds that entry already."""
        values = dataclasses.asdict(entry)
        values.pop("id")
        statement = (
            self._insert(BENCH_HISTORY)
            .values(values)
            .on_conflict_do_nothing()
            .returning(BENCH_HISTORY.c.id)
        )
        async with self._engine.begin() as conn:
            stored = (await conn.execute(statement)).first()
        return dataclasses.replace(entry, id=stored.id) if stored is not None else None

    async def run_entries(self, run_id: str, *, with_records: bool = True) -> list[BenchEntry]:
        """The entries a suite run has stored, in the order it stored them."""
        statement = self._select(with_records).where(BENCH_HISTORY.c.run_id == run_id)
        return await self._entries(statement.order_by(BENCH_HISTORY.c.id))

    async def baseline(self, entry: str, *, excluding_run: str) -> BenchEntry | None:
        """The newest accepted entry `entry` of another run: what the gate compares with."""
        statement = (
            self._select(True)
            .where(
                BENCH_HISTORY.c.entry == entry,
                BENCH_HISTORY.c.accepted.is_(True),
                BENCH_HISTORY.c.run_id != excluding_run,
            )
            .order_by(BENCH_HISTORY.c.id.desc())
            .limit(1)
        )
        found = await self._entries(statement)
        return found[0] if found else None

    async def get(self, entry_id: int) -> BenchEntry:
        found = await self._entries(self._select(True).where(BENCH_HISTORY.c.id == entry_id))
        if not found:
            raise UnknownBenchEntryError(f"no benchmark history entry #{entry_id}")
        return found[0]

    async def accept(self, entry_id: int) -> BenchEntry:
        """Make entry `entry_id` a baseline (a change found worse, but intended)."""
        statement = (
            update(BENCH_HISTORY).where(BENCH_HISTORY.c.id == entry_id).values(accepted=True)
        )
        async with self._engine.begin() as conn:
            changed = (await conn.execute(statement)).rowcount
        if not changed:
            raise UnknownBenchEntryError(f"no benchmark history entry #{entry_id}")
        return await self.get(entry_id)

    async def history(
        self,
        *,
        since_ns: int | None = None,
        entries: Sequence[str] = (),
        with_records: bool = False,
        limit: int | None = None,
    ) -> list[BenchEntry]:
        """Entries oldest first (the newest `limit` of them), optionally since a time and
        only some entry keys."""
        statement = self._select(with_records)
        if since_ns is not None:
            statement = statement.where(BENCH_HISTORY.c.created_at >= since_ns)
        if entries:
            statement = statement.where(BENCH_HISTORY.c.entry.in_(list(entries)))
        statement = statement.order_by(BENCH_HISTORY.c.id.desc())
        if limit is not None:
            statement = statement.limit(limit)
        return list(reversed(await self._entries(statement)))

    async def latest(self) -> list[BenchEntry]:
        """The newest entry of every (dataset, attributor, settings), by entry key."""
        newest = select(func.max(BENCH_HISTORY.c.id)).group_by(BENCH_HISTORY.c.entry)
        statement = self._select(False).where(BENCH_HISTORY.c.id.in_(newest.scalar_subquery()))
        return await self._entries(statement.order_by(BENCH_HISTORY.c.entry))

    def _select(self, with_records: bool) -> Any:
        return select(BENCH_HISTORY) if with_records else select(*_SUMMARY_COLUMNS)

    async def _entries(self, statement: Any) -> list[BenchEntry]:
        async with self._engine.connect() as conn:
            return [_entry(row) for row in await conn.execute(statement)]


def _entry(row: Row[Any]) -> BenchEntry:
    values = dict(row._mapping)
    values.setdefault("records", [])
    return BenchEntry(**values)
