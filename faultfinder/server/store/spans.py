"""The span store: idempotent span writes, the runs they form, outcomes and attributions.

Spans are keyed by (trace_id, span_id). A span sent again is ignored: the first copy
wins (exporters resend identical spans on retry, and "ignore" keeps each write one
cheap bulk insert). Every write call is one transaction that stores the new spans and
updates each touched run exactly once; run aggregates are merged in SQL
(`INSERT … ON CONFLICT DO UPDATE`), so concurrent writers — several replicas on one
PostgreSQL — never lose an update. Each span is filed under the run the decoder stamped
on it (`SpanRecord.run_id`). The write path is `span_writes.py`'s, the listing queries
`run_listing.py`'s.

Run rules kept here (the lifecycle in `faultfinder/server/lifecycle.py` decides status changes):

- root: the earliest-starting span without a parent; null while only orphans arrived.
- outcome from span attributes: `failure` sticks once seen; an outcome posted through
  `set_outcome` is authoritative and span attributes do not override it.
- task / ground truth / final answer: the latest non-empty value wins, except that
  ground truth and final answer posted with an outcome are kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from sqlalchemy import func, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faultfinder.attributors.model import Attribution, AttributionStatus
from faultfinder.reading.model import SpanRecord
from faultfinder.server.db.models import RunOutcome, RunStatus
from faultfinder.server.store import contents, settle
from faultfinder.server.store.attributions import (
    blame_after,
    insert_attribution,
    ok_attribution_modes,
    ok_attributions,
)
from faultfinder.server.store.read_threads import SqliteReadThreads
from faultfinder.server.store.rows import (
    RunRow,
    UnknownRunError,
    span_record,
)
from faultfinder.server.store.run_listing import (
    attributions_of_runs,
    carriers_of_their_traces,
    listing,
    page_of,
    start_order,
)
from faultfinder.server.store.span_writes import SpanWrites
from faultfinder.server.store.tables import (
    ATTRIBUTIONS,
    RUNS,
    SPANS,
    clean_text,
    now_ns,
)
from faultfinder.server.store.write_thread import file_database

__all__ = ["SpanStore"]

T = TypeVar("T")


class SpanStore:
    """Spans, runs and attributions in one SQLite or PostgreSQL database (async)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        max_spans_per_run: int | None = None,
    ) -> None:
        self._engine = engine
        self.max_spans_per_run = max_spans_per_run
        """Most spans read of one run (its earliest); None reads them all."""
        dialect = engine.dialect
        self._sqlite_file = file_database(engine.url) if dialect.name == "sqlite" else None
        """The SQLite database file whose span writes go through `SqliteWriteThread`
        (started at the first write) and whose reads go through `SqliteReadThreads` (from
        the first read); None on PostgreSQL and for an in-memory database."""
        self._writes = SpanWrites(engine, self._sqlite_file)
        self._reads: SqliteReadThreads | None = None

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
        return await self._writes.write(spans, received_at=received_at)

    async def aclose(self) -> None:
        """Stop the SQLite write and read threads, if started (the engine is the caller's)."""
        await self._writes.aclose()
        reads, self._reads = self._reads, None
        if reads is not None:
            await asyncio.to_thread(reads.close)

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

    async def record_attribution(
        self, conn: AsyncConnection, run_id: str, attribution: Attribution, now: int
    ) -> int:
        """Store a run's attribution on `conn`, in the caller's transaction (the job queue's,
        settling the job); an ok one moves the failed run to `attributed`. Returns its id."""
        attribution_id = await insert_attribution(conn, run_id, attribution, now=now)
        if attribution.status is AttributionStatus.OK:
            await settle.mark_attributed(conn, run_id, now=now)
        return attribution_id

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
            carriers = carriers_of_their_traces(conn, {run_id: spans}).get(run_id)
            if not carriers:
                return spans
            return sorted([*spans, *carriers], key=start_order)

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
            carriers = await conn.run_sync(lambda sync: carriers_of_their_traces(sync, spans))
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
        statement = listing(
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
        return page_of(runs, limit)

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
        statement = listing(
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
            return runs, attributions_of_runs(conn, [run.id for run in runs[:limit]])

        runs, attributions = await self._read(read)
        page, next_cursor = page_of(runs, limit)
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

    async def count_run_spans(self, run_id: str) -> int:
        """How many spans are stored for the run `run_id`."""
        return await contents.count_run_spans(self._engine, run_id)

    async def stored_contents(self) -> contents.StoredContents:
        """Every stored span key, run status and attribution (the chaos drills' check)."""
        return await contents.stored_contents(self._engine)

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
        return await self._read(lambda conn: attributions_of_runs(conn, ids))

    async def ok_attributions(
        self, *, since_ns: int | None = None
    ) -> list[tuple[str, str, str, int, int]]:
        """(run id, method, agent, step, created_at) of every ok attribution."""
        return await ok_attributions(self._engine, since_ns=since_ns)

    async def ok_attribution_modes(
        self, *, since_ns: int | None = None
    ) -> list[tuple[str, str, str | None, int]]:
        """(run id, agent, failure mode, created_at) of every ok attribution."""
        return await ok_attribution_modes(self._engine, since_ns=since_ns)

    async def blame_after(
        self, after_id: int, *, limit: int = 10_000
    ) -> list[tuple[int, str, str, str | None]]:
        """(id, method, agent, failure mode) of the ok attributions naming an agent stored
        after attribution `after_id`, oldest first (`/metrics` counts blame from these)."""
        return await blame_after(self._engine, after_id, limit=limit)

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
