"""The span store: idempotent span writes, the runs they form, outcomes and attributions.

Spans are keyed by (trace_id, span_id). A span sent again is ignored: the first copy
wins (exporters resend identical spans on retry, and "ignore" keeps each write one
cheap bulk insert). Every write call is one transaction that stores the new spans and
updates each touched run exactly once; run aggregates are merged in SQL
(`INSERT … ON CONFLICT DO UPDATE`), so concurrent writers — several replicas on one
PostgreSQL — never lose an update.

Run rules kept here (the lifecycle in `faultfinder/server/lifecycle.py` decides status changes):

- root: the earliest-starting span without a parent; null while only orphans arrived.
- outcome from span attributes: `failure` sticks once seen; an outcome posted through
  `set_outcome` is authoritative and span attributes do not override it.
- task / ground truth / final answer: the latest non-empty value wins, except that
  ground truth and final answer posted with an outcome are kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from sqlalchemy import Select, and_, exists, func, or_, select, update
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from faultfinder import conventions as c
from faultfinder.attributors.model import Attribution
from faultfinder.server.db.engine import dumps_json
from faultfinder.server.db.models import RunOutcome, RunStatus
from faultfinder.server.otlp.mapping import RunFacts, is_log_events_carrier, run_facts
from faultfinder.server.otlp.model import SpanRecord
from faultfinder.server.store import settle
from faultfinder.server.store.attributions import insert_attribution, ok_attributions
from faultfinder.server.store.read_threads import SqliteReadThreads
from faultfinder.server.store.rows import (
    SPAN_ROW_COLUMNS,
    RunRow,
    UnknownRunError,
    decode_cursor,
    encode_cursor,
    span_record,
    span_row,
)
from faultfinder.server.store.tables import (
    ATTRIBUTIONS,
    RUNS,
    SPANS,
    clean,
    clean_text,
    insert_for,
    now_ns,
)
from faultfinder.server.store.write_thread import SqliteWriteThread, file_database
from faultfinder.server.store.writes import RunDelta, known_outcome, runs_upsert

__all__ = ["SpanStore"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Batch:
    """The span rows of one write, in key order, and what their runs need."""

    rows: list[tuple[Any, ...]]
    keys: list[tuple[str, str]]
    first_copy: dict[tuple[str, str], SpanRecord]
    facts: dict[tuple[str, str], RunFacts]
    now: int


class _SomeStoredAlready(Exception):
    """Rolls back a write that found spans already stored (`SpanStore._insert_counting`)."""


_MAX_SPAN_PARAMETERS = 30_000
"""Bound parameters in one span INSERT: below SQLite's (32,766) and PostgreSQL's (32,767)
limits."""


class SpanStore:
    """Spans, runs and attributions in one SQLite or PostgreSQL database (async)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        group_by_conversation: bool = False,
        max_spans_per_run: int | None = None,
    ) -> None:
        self._engine = engine
        self._group_by_conversation = group_by_conversation
        self.max_spans_per_run = max_spans_per_run
        """Most spans read of one run (its earliest); None reads them all."""
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
        """Whether `write_spans` first tries the insert that counts new rows instead of
        returning them (SQLite; PostgreSQL returns all rows of a statement at once)."""
        self._sqlite_file = file_database(engine.url) if dialect.name == "sqlite" else None
        """The SQLite database file whose span writes go through `SqliteWriteThread`
        (started at the first write) and whose reads go through `SqliteReadThreads` (from
        the first read); None on PostgreSQL and for an in-memory database."""
        self._write_thread: SqliteWriteThread | None = None
        self._reads: SqliteReadThreads | None = None
        self._upsert_runs = runs_upsert(insert(RUNS), least, greatest)

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    # -- writing -----------------------------------------------------------------------

    async def write_spans(
        self, spans: Sequence[SpanRecord], *, received_at: float | None = None
    ) -> int:
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
            span_facts = run_facts(span, group_by_conversation=self._group_by_conversation)
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
            if self._write_thread is None and self._sqlite_file is not None:
                self._write_thread = SqliteWriteThread(self._engine, self._sqlite_file)
            if self._write_thread is not None:
                return await self._write_thread.run(self._write_in_thread, batch)
            try:
                async with self._engine.begin() as conn:
                    return await conn.run_sync(self._insert_counting, batch)
            except _SomeStoredAlready:
                pass
        async with self._engine.begin() as conn:
            return await conn.run_sync(self._insert_returning, batch)

    async def aclose(self) -> None:
        """Stop the SQLite write and read threads, if started (the engine is the caller's)."""
        write_thread, self._write_thread = self._write_thread, None
        if write_thread is not None:
            await asyncio.to_thread(write_thread.close)
        reads, self._reads = self._reads, None
        if reads is not None:
            await asyncio.to_thread(reads.close)

    def _write_in_thread(self, batch: _Batch) -> int:
        """SQLite, in the write thread: `_insert_counting`, else `_insert_returning`."""
        assert self._write_thread is not None
        engine = self._write_thread.engine
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

    async def set_outcome(
        self,
        run_id: str,
        outcome: str,
        *,
        reason: str | None = None,
        ground_truth: str | None = None,
        final_answer: str | None = None,
    ) -> RunRow:
        """Record an outcome posted for a run (e.g. by a grader); the lifecycle then
        completes the run, or fails it when `outcome` is `failure` (also a complete one).

        Raises ValueError for an outcome other than success/failure and UnknownRunError
        when no run has that id.
        """
        try:
            verdict = RunOutcome(outcome.strip().lower())
        except ValueError:
            raise ValueError(
                f"outcome must be one of {', '.join(RunOutcome)}, not {outcome!r}"
            ) from None
        now = now_ns()
        statement = (
            update(RUNS)
            .where(RUNS.c.id == run_id)
            .values(
                outcome=verdict.value,
                outcome_reason=clean_text(reason),
                outcome_posted_at=now,
                ground_truth=func.coalesce(clean_text(ground_truth), RUNS.c.ground_truth),
                final_answer=func.coalesce(clean_text(final_answer), RUNS.c.final_answer),
                updated_at=now,
                version=RUNS.c.version + 1,
                needs_sweep=True,
            )
            .returning(*RUNS.c)
        )
        async with self._engine.begin() as conn:
            row = (await conn.execute(statement)).first()
        if row is None:
            raise UnknownRunError(f"no run {run_id!r}")
        return RunRow.from_row(row)

    async def set_status(
        self, run_id: str, status: RunStatus | str, *, expected: RunStatus | str | None = None
    ) -> bool:
        """Set a run's status (e.g. `attributed`), only if it is `expected` when given.

        Returns whether the run changed.
        """
        new_status = RunStatus(status)
        now = now_ns()
        statement = update(RUNS).where(RUNS.c.id == run_id)
        if expected is not None:
            statement = statement.where(RUNS.c.status == RunStatus(expected).value)
        statement = statement.values(
            status=new_status.value,
            completed_at=func.coalesce(RUNS.c.completed_at, now)
            if new_status != RunStatus.RUNNING
            else RUNS.c.completed_at,
            updated_at=now,
            version=RUNS.c.version + 1,
        ).returning(RUNS.c.id)
        async with self._engine.begin() as conn:
            return (await conn.execute(statement)).first() is not None

    async def add_attribution(self, run_id: str, attribution: Attribution) -> int:
        """Store an attribution of a run; returns its id. Raises UnknownRunError."""
        try:
            async with self._engine.begin() as conn:
                return await insert_attribution(conn, run_id, attribution, now=now_ns())
        except IntegrityError:
            raise UnknownRunError(
                f"no run {run_id!r} to attach a {attribution.method} attribution to"
            ) from None

    async def keep_shape(
        self, run_id: str, *, agents: Sequence[str], n_steps: int, version: int
    ) -> bool:
        """Keep a finished run's trajectory agents and step count on its row, if the row
        is still at `version` (no span arrived since it was read); returns whether it
        was kept. A derived value: the row's version does not change."""
        statement = (
            update(RUNS)
            .where(
                RUNS.c.id == run_id,
                RUNS.c.version == version,
                RUNS.c.status != RunStatus.RUNNING.value,
            )
            .values(agents=list(agents), n_steps=n_steps)
            .returning(RUNS.c.id)
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(statement)).first() is not None

    # -- reading -----------------------------------------------------------------------

    async def _read(self, read: Callable[[Connection], T]) -> T:
        """`read(connection)`, which fetches all it returns: on a SQLite file in one call
        to a read thread (`SqliteReadThreads`), else on a connection of the engine."""
        if self._sqlite_file is not None:
            if self._reads is None:
                self._reads = SqliteReadThreads(self._engine)
            return await self._reads.run(read)
        async with self._engine.connect() as conn:
            return await conn.run_sync(read)

    def _run_spans_read(self, run_id: str) -> Callable[[Connection], list[SpanRecord]]:
        """The read of a run's spans, in start order: all, or the earliest
        `max_spans_per_run`."""
        statement = (
            select(SPANS)
            .where(SPANS.c.run_id == run_id)
            .order_by(SPANS.c.start_time_unix_nano, SPANS.c.trace_id, SPANS.c.span_id)
        )
        if self.max_spans_per_run is not None:
            statement = statement.limit(self.max_spans_per_run)

        def read(conn: Connection) -> list[SpanRecord]:
            spans = [span_record(row) for row in conn.execute(statement)]
            carriers = _carriers_of_their_traces(conn, {run_id: spans}).get(run_id)
            if not carriers:
                return spans
            return sorted([*spans, *carriers], key=_start_order)

        return read

    async def run_spans(self, run_id: str) -> list[SpanRecord]:
        """The stored spans of a run, in start order: all of them, or the earliest
        `max_spans_per_run`."""
        return await self._read(self._run_spans_read(run_id))

    async def with_run_spans(self, run_id: str, then: Callable[[list[SpanRecord]], T]) -> T:
        """`then(run_spans(run_id))`, computed off the event loop: on a SQLite file in the
        read thread that read the spans (one trip), else in a worker thread."""
        read = self._run_spans_read(run_id)
        if self._sqlite_file is not None:
            return await self._read(lambda conn: then(read(conn)))
        return await asyncio.to_thread(then, await self._read(read))

    async def spans_of_runs(self, run_ids: Sequence[str]) -> dict[str, list[SpanRecord]]:
        """The stored spans of several runs in one query (unordered within a run, at most
        `max_spans_per_run` of each; runs without spans are absent). Cheaper than one
        `run_spans` per run for a batch. Rows are streamed, so a run far over the limit
        costs reading time, not memory."""
        if not run_ids:
            return {}
        cap = self.max_spans_per_run
        statement = select(SPANS).where(SPANS.c.run_id.in_(list(run_ids)))
        spans: dict[str, list[SpanRecord]] = {}
        async with self._engine.connect() as conn:
            result = await conn.stream(statement.execution_options(yield_per=1000))
            async for row in result:
                held = spans.setdefault(row.run_id, [])
                if cap is None or len(held) < cap:
                    held.append(span_record(row))
            carriers = await conn.run_sync(lambda sync: _carriers_of_their_traces(sync, spans))
        for run_id, more in carriers.items():
            spans[run_id].extend(more)
        return spans

    async def get_run(self, run_id: str) -> RunRow | None:
        statement = select(RUNS).where(RUNS.c.id == run_id)
        row = await self._read(lambda conn: conn.execute(statement).first())
        return None if row is None else RunRow.from_row(row)

    async def list_runs(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        blamed_agent: str | None = None,
        since_ns: int | None = None,
        until_ns: int | None = None,
    ) -> tuple[list[RunRow], str | None]:
        """Runs newest first (by when the store first saw them), one page at a time.

        `blamed_agent` keeps runs with an ok attribution naming that agent (any case);
        `since_ns`/`until_ns` bound the run's earliest span start (Unix ns).

        Pass the returned cursor to get the next page; it is None after the last page.
        Runs created after the first page was read do not show up on later pages, so a
        walk through all pages returns each run at most once and every older run once.
        Raises InvalidCursorError for a cursor this method did not return.
        """
        statement = _listing(
            status=status,
            project=project,
            limit=limit,
            cursor=cursor,
            blamed_agent=blamed_agent,
            since_ns=since_ns,
            until_ns=until_ns,
        )
        runs = await self._read(
            lambda conn: [RunRow.from_row(row) for row in conn.execute(statement)]
        )
        return _page(runs, limit)

    async def list_runs_with_attributions(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        blamed_agent: str | None = None,
        since_ns: int | None = None,
        until_ns: int | None = None,
    ) -> tuple[list[RunRow], str | None, dict[str, list[Attribution]]]:
        """`list_runs` and `attributions_by_run` of its page, in one read."""
        statement = _listing(
            status=status,
            project=project,
            limit=limit,
            cursor=cursor,
            blamed_agent=blamed_agent,
            since_ns=since_ns,
            until_ns=until_ns,
        )

        def read(conn: Connection) -> tuple[list[RunRow], dict[str, list[Attribution]]]:
            runs = [RunRow.from_row(row) for row in conn.execute(statement)]
            return runs, _attributions(conn, [run.id for run in runs[:limit]])

        runs, attributions = await self._read(read)
        page, next_cursor = _page(runs, limit)
        return page, next_cursor, attributions

    async def count_runs(self, *, status: str | None = None, quiet_since: int | None = None) -> int:
        """How many runs are in `status`; with `quiet_since` (Unix ns), only those whose
        last span was received by then."""
        statement = select(func.count()).select_from(RUNS)
        if status is not None:
            statement = statement.where(RUNS.c.status == status)
        if quiet_since is not None:
            statement = statement.where(RUNS.c.last_span_received_at <= quiet_since)
        async with self._engine.connect() as conn:
            count: int = (await conn.execute(statement)).scalar_one()
        return count

    async def runs_by_status(self) -> tuple[dict[str, int], int]:
        """How many runs are in each status, and how many of them were failed as
        `unfinished` (for /metrics); one pass over the runs."""
        statement = select(RUNS.c.status, RUNS.c.unfinished, func.count()).group_by(
            RUNS.c.status, RUNS.c.unfinished
        )
        by_status: dict[str, int] = {}
        unfinished = 0
        async with self._engine.connect() as conn:
            for status, marked, count in (await conn.execute(statement)).tuples():
                by_status[status] = by_status.get(status, 0) + count
                unfinished += count if marked else 0
        return by_status, unfinished

    async def count_spans(self) -> int:
        async with self._engine.connect() as conn:
            count: int = (await conn.execute(select(func.count()).select_from(SPANS))).scalar_one()
        return count

    async def get_attribution(self, attribution_id: int) -> Attribution | None:
        statement = select(ATTRIBUTIONS.c.payload).where(ATTRIBUTIONS.c.id == attribution_id)
        async with self._engine.connect() as conn:
            payload = (await conn.execute(statement)).scalar_one_or_none()
        return Attribution.model_validate(payload) if payload is not None else None

    async def list_attributions(self, run_id: str) -> list[Attribution]:
        """A run's attributions, oldest first."""
        return (await self.attributions_by_run([run_id])).get(run_id, [])

    async def attributions_by_run(self, run_ids: Iterable[str]) -> dict[str, list[Attribution]]:
        """Attributions of several runs in one query (for listings), oldest first."""
        ids = list(dict.fromkeys(run_ids))
        if not ids:
            return {}
        return await self._read(lambda conn: _attributions(conn, ids))

    async def ok_attributions(
        self, *, since_ns: int | None = None
    ) -> list[tuple[str, str, str, int, int]]:
        """(run id, method, agent, step, created_at) of every ok attribution."""
        return await ok_attributions(self._engine, since_ns=since_ns)

    # -- the lifecycle's statements (`faultfinder.server.store.settle`) ------------------

    async def settle_due(
        self,
        *,
        quiet_since: int,
        unfinished_since: int,
        now: int,
        limit: int = 1000,
        only: str | None = None,
    ) -> tuple[int, list[tuple[str, RunStatus, RunStatus]], list[tuple[str, int | None]]]:
        """`settle.settle_due` on this store's database."""
        return await settle.settle_due(
            self._engine,
            quiet_since=quiet_since,
            unfinished_since=unfinished_since,
            now=now,
            limit=limit,
            only=only,
        )

    async def mark_recovered(self, run_id: str, *, last_span_received_at: int) -> None:
        """`settle.mark_recovered` on this store's database."""
        await settle.mark_recovered(
            self._engine, run_id, last_span_received_at=last_span_received_at
        )

    async def finish_checked(
        self, run_id: str, status: RunStatus, *, quiet_since: int, unfinished_since: int, now: int
    ) -> bool:
        """`settle.finish_checked` on this store's database."""
        return await settle.finish_checked(
            self._engine,
            run_id,
            status,
            quiet_since=quiet_since,
            unfinished_since=unfinished_since,
            now=now,
        )


def _listing(
    *,
    status: str | None,
    project: str | None,
    limit: int,
    cursor: str | None,
    blamed_agent: str | None,
    since_ns: int | None,
    until_ns: int | None,
) -> Select[Any]:
    """The query of `SpanStore.list_runs`: its page and one run more (is there a next?)."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    statement = select(RUNS).order_by(RUNS.c.created_at.desc(), RUNS.c.id.desc())
    if status is not None:
        statement = statement.where(RUNS.c.status == status)
    if project is not None:
        statement = statement.where(RUNS.c.project == project)
    if blamed_agent is not None:
        statement = statement.where(
            exists().where(
                ATTRIBUTIONS.c.run_id == RUNS.c.id,
                ATTRIBUTIONS.c.status == "ok",
                func.lower(ATTRIBUTIONS.c.agent) == blamed_agent.lower(),
            )
        )
    if since_ns is not None:
        statement = statement.where(RUNS.c.started_at >= since_ns)
    if until_ns is not None:
        statement = statement.where(RUNS.c.started_at < until_ns)
    if cursor is not None:
        created_at, run_id = decode_cursor(cursor)
        statement = statement.where(
            or_(
                RUNS.c.created_at < created_at,
                and_(RUNS.c.created_at == created_at, RUNS.c.id < run_id),
            )
        )
    return statement.limit(limit + 1)


def _page(runs: list[RunRow], limit: int) -> tuple[list[RunRow], str | None]:
    """The page of `_listing`'s rows, and the cursor of the next (None after the last)."""
    if len(runs) <= limit:
        return runs, None
    page = runs[:limit]
    return page, encode_cursor(page[-1])


def _attributions(conn: Connection, run_ids: Sequence[str]) -> dict[str, list[Attribution]]:
    """Attributions of these runs, oldest first."""
    if not run_ids:
        return {}
    statement = (
        select(ATTRIBUTIONS.c.run_id, ATTRIBUTIONS.c.payload)
        .where(ATTRIBUTIONS.c.run_id.in_(list(run_ids)))
        .order_by(ATTRIBUTIONS.c.id)
    )
    found: dict[str, list[Attribution]] = {}
    for row in conn.execute(statement):
        found.setdefault(row.run_id, []).append(Attribution.model_validate(row.payload))
    return found


def _start_order(span: SpanRecord) -> tuple[int, str, str]:
    return span.start_time_unix_nano, span.trace_id, span.span_id


def _carriers_of_their_traces(
    conn: Connection, spans_of_runs: dict[str, list[SpanRecord]]
) -> dict[str, list[SpanRecord]]:
    """The carriers of GenAI log records (`otlp/log_events.py`) that belong to runs not
    keyed by their trace, by run.

    A log record names its span by trace and span id only, with none of the attributes
    that key a run otherwise (`faultfinder.run.id`, a conversation id), so its carrier is
    stored under its trace. A run grouped by those attributes takes the carriers stored
    under each of its spans' traces; the assembler keeps those whose span is in the run.
    """
    wanted: dict[str, set[str]] = {}
    for run_id, spans in spans_of_runs.items():
        for trace_id in {span.trace_id for span in spans} - {run_id}:
            wanted.setdefault(trace_id, set()).add(run_id)
    if not wanted:
        return {}
    statement = select(SPANS).where(
        SPANS.c.run_id.in_(sorted(wanted)), SPANS.c.name == c.LOG_EVENTS_SPAN
    )
    found: dict[str, list[SpanRecord]] = {}
    for row in conn.execute(statement):
        carrier = span_record(row)
        if is_log_events_carrier(carrier):
            for run_id in wanted[carrier.trace_id]:
                found.setdefault(run_id, []).append(carrier)
    return found
