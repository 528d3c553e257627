"""The span store's writes: one transaction per batch that stores the new spans and merges
them into their runs.

Spans are keyed by (trace_id, span_id); a span already stored is ignored. Each span
arrives stamped with its run (`SpanRecord.run_id`, by the decoder); its other run facts
(`faultfinder.reading.runs.run_facts`) become one `INSERT … ON CONFLICT DO UPDATE` of
every touched run, so concurrent writers never lose an update. On a SQLite file the
transaction runs in a thread of its own (`write_thread.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import func
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.ext.asyncio import AsyncEngine

from faultfinder.reading.model import SpanRecord
from faultfinder.reading.runs import RunFacts, run_facts
from faultfinder.server.db.engine import dumps_json
from faultfinder.server.errors import InternalSignal
from faultfinder.server.store.rows import SPAN_ROW_COLUMNS, span_row
from faultfinder.server.store.tables import RUNS, SPANS, clean, insert_for, now_ns
from faultfinder.server.store.write_thread import SqliteWriteThread
from faultfinder.server.store.writes import RunDelta, known_outcome, runs_upsert

__all__ = ["SpanWrites"]


@dataclass(frozen=True, slots=True)
class _Batch:
    """The span rows of one write, in key order, and what their runs need."""

    rows: list[tuple[Any, ...]]
    keys: list[tuple[str, str]]
    first_copy: dict[tuple[str, str], SpanRecord]
    facts: dict[tuple[str, str], RunFacts]
    now: int


class _SomeStoredAlready(InternalSignal):
    """Rolls back a write that found spans already stored (`SpanWrites._insert_counting`)."""


_MAX_SPAN_PARAMETERS = 30_000
"""Bound parameters in one span INSERT: below SQLite's (32,766) and PostgreSQL's (32,767)
limits."""


class SpanWrites:
    """The write path of `SpanStore`: the span INSERTs (written once per size and kind),
    the runs' upsert and, on a SQLite file, the write thread."""

    def __init__(self, engine: AsyncEngine, sqlite_file: str | None) -> None:
        self._engine = engine
        self._sqlite_file = sqlite_file
        """The SQLite database file whose writes go through `SqliteWriteThread` (started
        at the first write); None on PostgreSQL and for an in-memory database."""
        self.write_thread: SqliteWriteThread | None = None
        insert = insert_for(engine)
        least: Any
        greatest: Any
        if engine.dialect.name == "sqlite":
            least, greatest = func.min, func.max  # SQLite's scalar min()/max() of two values
        else:
            least, greatest = func.least, func.greatest
        if set(SPAN_ROW_COLUMNS) != set(SPANS.c.keys()):
            raise RuntimeError("span_row's columns no longer match the spans table")
        dialect = engine.dialect
        most_rows = _MAX_SPAN_PARAMETERS // len(SPAN_ROW_COLUMNS)
        self._span_page_rows = max(1, min(dialect.insertmanyvalues_page_size, most_rows))
        self._numbered_parameters = dialect.paramstyle == "numeric_dollar"
        if not self._numbered_parameters and dialect.paramstyle != "qmark":
            raise ValueError(f"unsupported parameter style {dialect.paramstyle!r}")
        self._span_inserts: dict[tuple[int, bool], str] = {}
        self._count_new_rows = dialect.name == "sqlite"
        """Whether `write` first tries the insert that counts new rows instead of
        returning them (SQLite; PostgreSQL returns all rows of a statement at once)."""
        self._upsert_runs = runs_upsert(insert(RUNS), least, greatest)

    async def aclose(self) -> None:
        """Stop the SQLite write thread, if started (the engine is the caller's)."""
        write_thread, self.write_thread = self.write_thread, None
        if write_thread is not None:
            await asyncio.to_thread(write_thread.close)

    async def write(self, spans: Sequence[SpanRecord], *, received_at: float | None = None) -> int:
        """Store spans and update their runs in one transaction; returns how many were new.

        Spans already stored (same trace and span id) are ignored, also within `spans`.
        `received_at` (Unix seconds) overrides the wall clock recorded for the write.
        """
        if not spans:
            return 0
        now = now_ns() if received_at is None else int(received_at * 1e9)
        rows: dict[tuple[str, str], tuple[Any, ...]] = {}
        first_copy: dict[tuple[str, str], SpanRecord] = {}
        facts: dict[tuple[str, str], RunFacts] = {}
        # Spans decoded from one resource share its attributes: serialise them once.
        resources: dict[int, tuple[object, str]] = {}
        for span in spans:
            key = (span.trace_id, span.span_id)
            if key in rows:
                continue
            span_facts = run_facts(span)
            resource = span.resource_attributes
            known = resources.get(id(resource))
            if known is None:
                known = resources[id(resource)] = (resource, dumps_json(resource))
            rows[key] = span_row(span, span_facts.run_id, now, known[1])
            first_copy[key] = span
            facts[key] = span_facts
        # Sorted keys give concurrent PostgreSQL writers one lock order (no deadlocks).
        keys = sorted(rows)
        batch = _Batch([rows[key] for key in keys], keys, first_copy, facts, now)
        if self._count_new_rows:
            if self.write_thread is None and self._sqlite_file is not None:
                self.write_thread = SqliteWriteThread(self._engine, self._sqlite_file)
            if self.write_thread is not None:
                return await self.write_thread.run(self._write_in_thread, batch)
            try:
                async with self._engine.begin() as conn:
                    return await conn.run_sync(self._insert_counting, batch)
            except _SomeStoredAlready:
                pass
        async with self._engine.begin() as conn:
            return await conn.run_sync(self._insert_returning, batch)

    def _write_in_thread(self, batch: _Batch) -> int:
        """SQLite, in the write thread: `_insert_counting`, else `_insert_returning`."""
        assert self.write_thread is not None
        engine = self.write_thread.engine
        try:
            with engine.begin() as conn:
                return self._insert_counting(conn, batch)
        except _SomeStoredAlready:
            pass
        with engine.begin() as conn:
            return self._insert_returning(conn, batch)

    def _insert_counting(self, conn: Connection, batch: _Batch) -> int:
        """SQLite: insert the rows without RETURNING and count them; when every one was
        new (the usual case), update their runs. Raises `_SomeStoredAlready` when some
        were stored already (an exporter's retry): the caller rolls back and writes the
        batch again with `_insert_returning`.

        RETURNING makes SQLite hand back each row in a step of its own, and each step
        takes the GIL back from whatever thread holds it.
        """
        for rows, result in self._insert_pages(conn, batch, returning=False):
            if result.rowcount != len(rows):
                raise _SomeStoredAlready
        self._update_runs(conn, set(batch.keys), batch)
        return len(batch.keys)

    def _insert_returning(self, conn: Connection, batch: _Batch) -> int:
        """Insert the rows, learning from the database which ones were new, and update
        their runs; returns how many were new."""
        inserted: set[tuple[str, str]] = set()
        for _rows, result in self._insert_pages(conn, batch, returning=True):
            keys = cast("list[Sequence[Any]]", result.all())
            inserted.update((str(key[0]), str(key[1])) for key in keys)
        self._update_runs(conn, inserted, batch)
        return len(inserted)

    def _insert_pages(
        self, conn: Connection, batch: _Batch, *, returning: bool
    ) -> Iterator[tuple[list[tuple[Any, ...]], CursorResult[Any]]]:
        """Insert `batch` one multi-row INSERT page at a time (stored keys are skipped),
        yielding each page's rows and result."""
        page = self._span_page_rows
        for start in range(0, len(batch.rows), page):
            rows = batch.rows[start : start + page]
            statement = self._span_insert_sql(len(rows), returning=returning)
            parameters = tuple(value for row in rows for value in row)
            yield rows, conn.exec_driver_sql(statement, parameters)

    def _update_runs(self, conn: Connection, inserted: set[tuple[str, str]], batch: _Batch) -> None:
        """Merge the newly stored spans into their runs (one upsert for all of them)."""
        if not inserted:
            return
        deltas: dict[str, RunDelta] = {}
        # Batch order (not key order) so "latest value wins" means latest sent.
        for key, span in batch.first_copy.items():
            if key not in inserted:
                continue
            span_facts = batch.facts[key]
            if not span_facts.opens_run:
                continue
            run_id = clean(span_facts.run_id)
            delta = deltas.get(run_id)
            if delta is None:
                delta = deltas[run_id] = RunDelta(
                    id=run_id,
                    project=clean(span.project),
                    started_at=span.start_time_unix_nano,
                    ended_at=span.end_time_unix_nano,
                )
            delta.add(
                span,
                is_root=span_facts.is_root,
                outcome=known_outcome(span_facts.outcome),
                local_parent=span_facts.local_parent,
            )
        if deltas:  # none when every new span only set an agent up
            conn.execute(
                self._upsert_runs, [deltas[run_id].row(batch.now) for run_id in sorted(deltas)]
            )

    def _span_insert_sql(self, n_rows: int, *, returning: bool) -> str:
        """The multi-row INSERT of `n_rows` span rows (written once per size and kind)."""
        statement = self._span_inserts.get((n_rows, returning))
        if statement is None:
            statement = self._span_inserts[n_rows, returning] = self._new_span_insert_sql(
                n_rows, returning=returning
            )
        return statement

    def _new_span_insert_sql(self, n_rows: int, *, returning: bool) -> str:
        width = len(SPAN_ROW_COLUMNS)
        if self._numbered_parameters:
            groups = (
                "(" + ",".join(f"${row * width + column + 1}" for column in range(width)) + ")"
                for row in range(n_rows)
            )
        else:
            groups = ("(" + ",".join("?" * width) + ")" for _ in range(n_rows))
        return (
            f"INSERT INTO {SPANS.name} ({', '.join(SPAN_ROW_COLUMNS)}) VALUES "
            + ",".join(groups)
            + " ON CONFLICT DO NOTHING"
            + (" RETURNING trace_id, span_id" if returning else "")
        )
