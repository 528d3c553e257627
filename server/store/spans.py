"""The span store: idempotent span writes, the runs they form, outcomes and attributions.

Spans are keyed by (trace_id, span_id). A span sent again is ignored: the first copy
wins (exporters resend identical spans on retry, and "ignore" keeps each write one
cheap bulk insert). Every write call is one transaction that stores the new spans and
updates each touched run exactly once; run aggregates are merged in SQL
(`INSERT … ON CONFLICT DO UPDATE`), so concurrent writers — several replicas on one
PostgreSQL — never lose an update.

Run rules kept here (the lifecycle in `server/lifecycle.py` decides status changes):

- root: the earliest-starting span without a parent; null while only orphans arrived.
- outcome from span attributes: `failure` sticks once seen; an outcome posted through
  `set_outcome` is authoritative and span attributes do not override it.
- task / ground truth / final answer: the latest non-empty value wins, except that
  ground truth and final answer posted with an outcome are kept.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import (
    ColumnElement,
    Insert,
    Row,
    Table,
    and_,
    case,
    exists,
    false,
    func,
    not_,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from faultfinder import conventions as c
from faultfinder.attributors.model import Attribution
from faultfinder.server.db.models import (
    AttributionTable,
    LabelTable,
    RunOutcome,
    RunStatus,
    RunTable,
    SpanTable,
)
from faultfinder.server.otlp.mapping import RunFacts, run_facts
from faultfinder.server.otlp.model import SpanEvent, SpanRecord, StatusCode

__all__ = [
    "InvalidCursorError",
    "RunOutcome",
    "RunRow",
    "RunStatus",
    "SpanStore",
    "UnknownRunError",
]

SPANS: Table = SpanTable.__table__  # type: ignore[attr-defined]
RUNS: Table = RunTable.__table__  # type: ignore[attr-defined]
ATTRIBUTIONS: Table = AttributionTable.__table__  # type: ignore[attr-defined]


class InvalidCursorError(ValueError):
    """A `cursor` passed to `list_runs` is not one it returned."""


class UnknownRunError(LookupError):
    """No run with the given id is stored."""


@dataclass(frozen=True, slots=True)
class RunRow:
    """A stored run as the rest of the server sees it (times are Unix nanoseconds, UTC)."""

    id: str
    project: str
    status: str
    """A `RunStatus` value."""
    root_span_id: str | None
    root_ended: bool
    """The root span has an end time."""
    root_error: bool
    """A span without a parent ended with status ERROR."""
    work_error: bool
    """Some span other than the root ended with status ERROR."""
    started_at: int
    ended_at: int
    last_span_received_at: int
    """Wall clock when a new span of the run was last stored."""
    n_spans: int
    outcome: str | None
    """A `RunOutcome` value, or None while nobody said."""
    outcome_reason: str | None
    outcome_posted_at: int | None
    """Wall clock when an outcome was posted through the API (None: not posted)."""
    task: str | None
    ground_truth: str | None
    final_answer: str | None
    completed_at: int | None
    created_at: int
    updated_at: int
    version: int
    """Incremented on every change of the run row."""
    needs_sweep: bool
    agents: list[str] | None = None
    """Not computed by the store (needs the assembler); None."""
    n_steps: int | None = None
    """Not computed by the store (needs the assembler); None."""

    @classmethod
    def from_row(cls, row: Row[Any] | Mapping[str, Any]) -> RunRow:
        values = row._mapping if isinstance(row, Row) else row
        root_ended_at = values["root_ended_at"]
        return cls(
            id=values["id"],
            project=values["project"],
            status=values["status"],
            root_span_id=values["root_span_id"],
            root_ended=bool(root_ended_at),
            root_error=bool(values["root_error"]),
            work_error=bool(values["work_error"]),
            started_at=values["started_at"],
            ended_at=values["ended_at"],
            last_span_received_at=values["last_span_received_at"],
            n_spans=values["n_spans"],
            outcome=values["outcome"],
            outcome_reason=values["outcome_reason"],
            outcome_posted_at=values["outcome_posted_at"],
            task=values["task"],
            ground_truth=values["ground_truth"],
            final_answer=values["final_answer"],
            completed_at=values["completed_at"],
            created_at=values["created_at"],
            updated_at=values["updated_at"],
            version=values["version"],
            needs_sweep=bool(values["needs_sweep"]),
        )


def _clean(text: str) -> str:
    # PostgreSQL text cannot hold NUL; one such span must not block its whole batch.
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _text(value: object) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return _clean(text) if text else None


def _outcome(value: str | None) -> str | None:
    return value if value in (RunOutcome.SUCCESS, RunOutcome.FAILURE) else None


@dataclass(slots=True)
class _RunDelta:
    """What one write call adds to one run, merged into the stored row in SQL."""

    id: str
    project: str
    started_at: int
    ended_at: int
    n_spans: int = 0
    root_span_id: str | None = None
    root_started_at: int | None = None
    root_ended_at: int | None = None
    root_error: bool = False
    work_error: bool = False
    outcome: str | None = None
    outcome_reason: str | None = None
    task: str | None = None
    ground_truth: str | None = None
    final_answer: str | None = None

    def add(self, span: SpanRecord, *, is_root: bool, outcome: str | None) -> None:
        self.n_spans += 1
        self.started_at = min(self.started_at, span.start_time_unix_nano)
        self.ended_at = max(self.ended_at, span.end_time_unix_nano)
        if is_root:
            if self.root_started_at is None or span.start_time_unix_nano < self.root_started_at:
                self.root_span_id = span.span_id
                self.root_started_at = span.start_time_unix_nano
                self.root_ended_at = span.end_time_unix_nano
            if span.status_code == StatusCode.ERROR:
                self.root_error = True
        elif span.status_code == StatusCode.ERROR:
            self.work_error = True
        attrs = span.attributes
        reason = _text(attrs.get(c.RUN_OUTCOME_REASON))
        if outcome is not None and self.outcome != RunOutcome.FAILURE:
            self.outcome, self.outcome_reason = outcome, reason
        elif reason is not None and self.outcome_reason is None:
            self.outcome_reason = reason
        self.task = _text(attrs.get(c.RUN_TASK)) or self.task
        self.ground_truth = _text(attrs.get(c.RUN_GROUND_TRUTH)) or self.ground_truth
        self.final_answer = _text(attrs.get(c.RUN_FINAL_ANSWER)) or self.final_answer

    def row(self, now: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "project": self.project,
            "status": RunStatus.RUNNING.value,
            "root_span_id": self.root_span_id,
            "root_started_at": self.root_started_at,
            "root_ended_at": self.root_ended_at,
            "root_error": self.root_error,
            "work_error": self.work_error,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "last_span_received_at": now,
            "n_spans": self.n_spans,
            "outcome": self.outcome,
            "outcome_reason": self.outcome_reason,
            "outcome_posted_at": None,
            "task": self.task,
            "ground_truth": self.ground_truth,
            "final_answer": self.final_answer,
            "completed_at": None,
            "created_at": now,
            "updated_at": now,
            "version": 1,
            # A running run is found by the sweep through its quiet period; the mark is
            # for finished runs that change. Keeping it off here keeps the marked rows
            # few, so PostgreSQL reads them by index instead of scanning every run.
            "needs_sweep": False,
        }


def _span_row(span: SpanRecord, run_id: str, received_at: int) -> dict[str, Any]:
    return {
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_span_id": span.parent_span_id,
        "run_id": _clean(run_id),
        "project": _clean(span.project),
        "name": _clean(span.name),
        "kind": int(span.kind),
        "start_time_unix_nano": span.start_time_unix_nano,
        "end_time_unix_nano": span.end_time_unix_nano,
        "status_code": int(span.status_code),
        "status_message": _clean(span.status_message),
        "attributes": span.attributes,
        "events": [
            {
                "name": event.name,
                "time_unix_nano": event.time_unix_nano,
                "attributes": event.attributes,
            }
            for event in span.events
        ],
        "resource_attributes": span.resource_attributes,
        "scope_name": _clean(span.scope_name),
        "received_at": received_at,
    }


def _span_record(row: Row[Any]) -> SpanRecord:
    return SpanRecord(
        trace_id=row.trace_id,
        span_id=row.span_id,
        parent_span_id=row.parent_span_id,
        name=row.name,
        start_time_unix_nano=row.start_time_unix_nano,
        end_time_unix_nano=row.end_time_unix_nano,
        kind=row.kind,
        status_code=StatusCode(row.status_code),
        status_message=row.status_message,
        attributes=row.attributes,
        events=tuple(
            SpanEvent(
                name=event["name"],
                time_unix_nano=event["time_unix_nano"],
                attributes=event.get("attributes") or {},
            )
            for event in row.events
        ),
        resource_attributes=row.resource_attributes,
        scope_name=row.scope_name,
        project=row.project,
    )


def _encode_cursor(run: RunRow) -> str:
    raw = orjson.dumps([run.created_at, run.id])
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, run_id = orjson.loads(raw)
    except (binascii.Error, ValueError, TypeError, orjson.JSONDecodeError):
        raise InvalidCursorError(f"cursor {cursor!r} is not one returned by listing runs") from None
    if not isinstance(created_at, int) or not isinstance(run_id, str):
        raise InvalidCursorError(f"cursor {cursor!r} is not one returned by listing runs")
    return created_at, run_id


def _now_ns() -> int:
    return time.time_ns()


class SpanStore:
    """Spans, runs and attributions in one SQLite or PostgreSQL database (async)."""

    def __init__(self, engine: AsyncEngine, *, group_by_conversation: bool = False) -> None:
        self._engine = engine
        self._group_by_conversation = group_by_conversation
        dialect = engine.dialect.name
        insert: Any
        least: Any
        greatest: Any
        self._postgres = dialect == "postgresql"
        if dialect == "sqlite":
            insert = sqlite.insert
            least, greatest = func.min, func.max  # SQLite's scalar min()/max() of two values
        elif dialect == "postgresql":
            insert = postgresql.insert
            least, greatest = func.least, func.greatest
        else:
            raise ValueError(f"the span store supports sqlite and postgresql, not {dialect!r}")
        self._insert_spans = (
            insert(SPANS).on_conflict_do_nothing().returning(SPANS.c.trace_id, SPANS.c.span_id)
        )
        self._upsert_runs = self._runs_upsert(insert(RUNS), least, greatest)

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    @staticmethod
    def _runs_upsert(stmt: Any, least: Any, greatest: Any) -> Insert:
        run, new = RUNS.c, stmt.excluded
        posted = run.outcome_posted_at.is_not(None)
        new_root_is_earlier = and_(
            new.root_span_id.is_not(None),
            or_(run.root_span_id.is_(None), new.root_started_at < run.root_started_at),
        )
        take_new_outcome = and_(
            ~posted,
            new.outcome.is_not(None),
            or_(run.outcome.is_(None), run.outcome != RunOutcome.FAILURE.value),
        )

        def latest(column: str) -> ColumnElement[Any]:
            return func.coalesce(new[column], run[column])

        def unless_posted(column: str) -> ColumnElement[Any]:
            return case((posted, func.coalesce(run[column], new[column])), else_=latest(column))

        upsert: Insert = stmt.on_conflict_do_update(
            index_elements=[run.id],
            set_={
                "n_spans": run.n_spans + new.n_spans,
                "started_at": least(run.started_at, new.started_at),
                "ended_at": greatest(run.ended_at, new.ended_at),
                "last_span_received_at": greatest(
                    run.last_span_received_at, new.last_span_received_at
                ),
                "root_span_id": case(
                    (new_root_is_earlier, new.root_span_id), else_=run.root_span_id
                ),
                "root_started_at": case(
                    (new_root_is_earlier, new.root_started_at), else_=run.root_started_at
                ),
                "root_ended_at": case(
                    (new_root_is_earlier, new.root_ended_at), else_=run.root_ended_at
                ),
                "root_error": or_(run.root_error, new.root_error),
                "work_error": or_(run.work_error, new.work_error),
                "outcome": case((take_new_outcome, new.outcome), else_=run.outcome),
                "outcome_reason": case(
                    (take_new_outcome, new.outcome_reason),
                    (posted, run.outcome_reason),
                    else_=func.coalesce(run.outcome_reason, new.outcome_reason),
                ),
                "task": latest("task"),
                "ground_truth": unless_posted("ground_truth"),
                "final_answer": unless_posted("final_answer"),
                "updated_at": new.updated_at,
                "version": run.version + 1,
                "needs_sweep": run.status != RunStatus.RUNNING.value,
            },
        )
        return upsert

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
        now = _now_ns() if received_at is None else int(received_at * 1e9)
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        first_copy: dict[tuple[str, str], SpanRecord] = {}
        facts: dict[tuple[str, str], RunFacts] = {}
        for span in spans:
            key = (span.trace_id, span.span_id)
            if key in rows:
                continue
            span_facts = run_facts(span, group_by_conversation=self._group_by_conversation)
            rows[key] = _span_row(span, span_facts.run_id, now)
            first_copy[key] = span
            facts[key] = span_facts
        # Sorted keys give concurrent PostgreSQL writers one lock order (no deadlocks).
        ordered = sorted(rows)
        async with self._engine.begin() as conn:
            result = await conn.execute(self._insert_spans, [rows[key] for key in ordered])
            inserted = {(row[0], row[1]) for row in result}
            if not inserted:
                return 0
            deltas: dict[str, _RunDelta] = {}
            # Batch order (not key order) so "latest value wins" means latest sent.
            for key, span in first_copy.items():
                if key not in inserted:
                    continue
                span_facts = facts[key]
                if not span_facts.opens_run:
                    continue
                run_id = _clean(span_facts.run_id)
                delta = deltas.get(run_id)
                if delta is None:
                    delta = deltas[run_id] = _RunDelta(
                        id=run_id,
                        project=_clean(span.project),
                        started_at=span.start_time_unix_nano,
                        ended_at=span.end_time_unix_nano,
                    )
                delta.add(span, is_root=span_facts.is_root, outcome=_outcome(span_facts.outcome))
            if deltas:  # none when every new span only set an agent up
                await conn.execute(
                    self._upsert_runs, [deltas[run_id].row(now) for run_id in sorted(deltas)]
                )
        return len(inserted)

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
        now = _now_ns()
        statement = (
            update(RUNS)
            .where(RUNS.c.id == run_id)
            .values(
                outcome=verdict.value,
                outcome_reason=_text(reason),
                outcome_posted_at=now,
                ground_truth=func.coalesce(_text(ground_truth), RUNS.c.ground_truth),
                final_answer=func.coalesce(_text(final_answer), RUNS.c.final_answer),
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
        now = _now_ns()
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
        values = {
            "run_id": run_id,
            "method": attribution.method,
            "status": str(attribution.status),
            "agent": attribution.agent,
            "step": attribution.step,
            "payload": attribution.model_dump(mode="json"),
            "created_at": _now_ns(),
        }
        try:
            async with self._engine.begin() as conn:
                result = await conn.execute(
                    ATTRIBUTIONS.insert().values(values).returning(ATTRIBUTIONS.c.id)
                )
                attribution_id: int = result.scalar_one()
        except IntegrityError:
            raise UnknownRunError(
                f"no run {run_id!r} to attach a {attribution.method} attribution to"
            ) from None
        return attribution_id

    # -- reading -----------------------------------------------------------------------

    async def run_spans(self, run_id: str) -> list[SpanRecord]:
        """All stored spans of a run, in start order."""
        statement = (
            select(SPANS)
            .where(SPANS.c.run_id == run_id)
            .order_by(SPANS.c.start_time_unix_nano, SPANS.c.trace_id, SPANS.c.span_id)
        )
        async with self._engine.connect() as conn:
            result = await conn.execute(statement)
            return [_span_record(row) for row in result]

    async def spans_of_runs(self, run_ids: Sequence[str]) -> dict[str, list[SpanRecord]]:
        """The stored spans of several runs in one query (unordered within a run; runs
        without spans are absent). Cheaper than one `run_spans` per run for a batch."""
        if not run_ids:
            return {}
        statement = select(SPANS).where(SPANS.c.run_id.in_(list(run_ids)))
        spans: dict[str, list[SpanRecord]] = {}
        async with self._engine.connect() as conn:
            for row in await conn.execute(statement):
                spans.setdefault(row.run_id, []).append(_span_record(row))
        return spans

    async def get_run(self, run_id: str) -> RunRow | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(RUNS).where(RUNS.c.id == run_id))).first()
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
            created_at, run_id = _decode_cursor(cursor)
            statement = statement.where(
                or_(
                    RUNS.c.created_at < created_at,
                    and_(RUNS.c.created_at == created_at, RUNS.c.id < run_id),
                )
            )
        async with self._engine.connect() as conn:
            result = await conn.execute(statement.limit(limit + 1))
            runs = [RunRow.from_row(row) for row in result]
        if len(runs) <= limit:
            return runs, None
        page = runs[:limit]
        return page, _encode_cursor(page[-1])

    async def count_runs(self, *, status: str | None = None) -> int:
        statement = select(func.count()).select_from(RUNS)
        if status is not None:
            statement = statement.where(RUNS.c.status == status)
        async with self._engine.connect() as conn:
            count: int = (await conn.execute(statement)).scalar_one()
        return count

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
        statement = (
            select(ATTRIBUTIONS.c.run_id, ATTRIBUTIONS.c.payload)
            .where(ATTRIBUTIONS.c.run_id.in_(ids))
            .order_by(ATTRIBUTIONS.c.id)
        )
        found: dict[str, list[Attribution]] = {}
        async with self._engine.connect() as conn:
            for row in await conn.execute(statement):
                found.setdefault(row.run_id, []).append(Attribution.model_validate(row.payload))
        return found

    # -- lifecycle support ---------------------------------------------------------------

    async def settle_due(
        self, *, quiet_since: int, now: int, limit: int = 1000, only: str | None = None
    ) -> tuple[int, list[tuple[str, RunStatus, RunStatus]], list[str]]:
        """Apply the lifecycle rules (`lifecycle.decide`) to one page of runs, in the
        database, in one short transaction.

        Finishes up to `limit` `running` runs that are due (an outcome was posted, or no
        new span since `quiet_since` (Unix ns) and no open root span), oldest activity
        first, as `failed` or `complete`; and re-checks up to `limit` `complete` runs that
        changed since the last sweep, failing those whose outcome now says failure.
        Each is one `UPDATE … WHERE id IN (page) … RETURNING` statement, atomic under
        SQLite's write lock; on PostgreSQL the page is locked (`SKIP LOCKED`) and the
        conditions are checked again on the row being written. So a span stored
        meanwhile keeps its run as the span left it, and two sweepers (replicas) never
        both move a run. No run is read into Python. Returns how many runs the larger of
        the two pages held (a full page means more may be waiting), the transitions
        (run id, from, to), and the due runs the database cannot decide: no outcome, a
        root that did not fail, and an error below it, which may have ended the work or
        been recovered from; the caller reads their spans (`finish_checked`). With
        `only`, the pages hold at most that run.
        """
        running = RunStatus.RUNNING.value
        complete = RunStatus.COMPLETE.value
        failed = RunStatus.FAILED.value
        # `lifecycle.is_failure`: an explicit outcome wins over the spans' statuses.
        failure = or_(
            RUNS.c.outcome == RunOutcome.FAILURE.value,
            and_(RUNS.c.outcome.is_(None), RUNS.c.root_error == true()),
        )
        undecided = and_(
            RUNS.c.outcome.is_(None), RUNS.c.root_error == false(), RUNS.c.work_error == true()
        )
        due = and_(RUNS.c.status == running, _finished(quiet_since))
        changed = and_(RUNS.c.needs_sweep == true(), RUNS.c.status == complete)
        decided = and_(due, not_(undecided))
        due_page = (
            select(RUNS.c.id).where(decided).order_by(RUNS.c.last_span_received_at).limit(limit)
        )
        pending_page = select(RUNS.c.id).where(due, undecided).limit(limit)
        # No ORDER BY: ordering by activity made SQLite walk every complete run ever
        # stored through the status index; unordered, it reads only the changed ones
        # through ix_runs_needs_sweep_status (each is cleared once seen, none starves).
        changed_page = select(RUNS.c.id).where(changed).limit(limit)
        if only is not None:
            due_page = due_page.where(RUNS.c.id == only)
            changed_page = changed_page.where(RUNS.c.id == only)
            pending_page = pending_page.where(RUNS.c.id == only)
        # On SQLite one statement runs alone under the database's write lock, so the
        # page's rows still meet the conditions; repeating them outside the subquery
        # made SQLite scan every run of the status instead of finding the page's rows by
        # primary key. On PostgreSQL a row another sweeper is settling is skipped, not
        # waited for, and a row a writer changed after the page was chosen is checked
        # again as it is now.
        recheck_due: tuple[ColumnElement[bool], ...] = ()
        recheck_changed: tuple[ColumnElement[bool], ...] = ()
        if self._postgres:
            due_page = due_page.with_for_update(skip_locked=True)
            changed_page = changed_page.with_for_update(skip_locked=True)
            recheck_due, recheck_changed = (decided,), (changed,)
        finish = (
            update(RUNS)
            .where(RUNS.c.id.in_(due_page.scalar_subquery()), *recheck_due)
            .values(
                status=case((failure, failed), else_=complete),
                completed_at=func.coalesce(RUNS.c.completed_at, now),
                updated_at=now,
                version=RUNS.c.version + 1,
                needs_sweep=False,
            )
            .returning(RUNS.c.id, RUNS.c.status)
        )
        recheck = (
            update(RUNS)
            .where(RUNS.c.id.in_(changed_page.scalar_subquery()), *recheck_changed)
            .values(
                status=case((failure, failed), else_=RUNS.c.status),
                updated_at=case((failure, now), else_=RUNS.c.updated_at),
                version=case((failure, RUNS.c.version + 1), else_=RUNS.c.version),
                needs_sweep=False,
            )
            .returning(RUNS.c.id, RUNS.c.status)
        )
        async with self._engine.begin() as conn:
            finished = (await conn.execute(finish)).all()
            rechecked = (await conn.execute(recheck)).all()
            pending = [row.id for row in await conn.execute(pending_page)]
        transitions = [(row.id, RunStatus.RUNNING, RunStatus(row.status)) for row in finished]
        transitions += [
            (row.id, RunStatus.COMPLETE, RunStatus.FAILED)
            for row in rechecked
            if row.status == failed
        ]
        return max(len(finished), len(rechecked), len(pending)), transitions, pending

    async def finish_checked(
        self, run_id: str, status: RunStatus, *, quiet_since: int, now: int
    ) -> bool:
        """Finish a run `settle_due` left undecided as `status` (the caller read its spans),
        if it is still due and undecided; returns whether it moved."""
        statement = (
            update(RUNS)
            .where(
                RUNS.c.id == run_id,
                RUNS.c.status == RunStatus.RUNNING.value,
                RUNS.c.outcome.is_(None),
                RUNS.c.root_error == false(),
                _finished(quiet_since),
            )
            .values(
                status=RunStatus(status).value,
                completed_at=func.coalesce(RUNS.c.completed_at, now),
                updated_at=now,
                version=RUNS.c.version + 1,
                needs_sweep=False,
            )
            .returning(RUNS.c.id)
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(statement)).first() is not None


def _finished(quiet_since: int) -> ColumnElement[bool]:
    """A running run is due: an outcome was posted, or no span arrived since
    `quiet_since` (Unix ns) and its root, if it has one, has ended."""
    return or_(
        and_(
            RUNS.c.last_span_received_at <= quiet_since,
            # A root that never ends keeps its run open; leaving such runs out keeps them
            # from crowding due runs past `limit`.
            or_(RUNS.c.root_span_id.is_(None), RUNS.c.root_ended_at > 0),
        ),
        RUNS.c.outcome_posted_at.is_not(None),
    )


LABELS: Table = LabelTable.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Label:
    """A human's verdict on a run: the agent and 0-based step that caused the failure."""

    id: int
    run_id: str
    agent: str
    step: int
    reason: str | None
    author: str | None
    created_at: int


class LabelStore:
    """Human labels (the gold for live accuracy) and the figures built on them."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def add(
        self, run_id: str, *, agent: str, step: int, reason: str | None, author: str | None
    ) -> Label:
        values = {
            "run_id": run_id,
            "agent": agent,
            "step": step,
            "reason": reason,
            "author": author,
            "created_at": _now_ns(),
        }
        try:
            async with self._engine.begin() as conn:
                row = (
                    await conn.execute(LABELS.insert().values(values).returning(*LABELS.c))
                ).one()
        except IntegrityError:
            raise UnknownRunError(f"no run {run_id!r} to label") from None
        return Label(**row._mapping)

    async def for_run(self, run_id: str) -> list[Label]:
        async with self._engine.connect() as conn:
            rows = await conn.execute(
                select(LABELS).where(LABELS.c.run_id == run_id).order_by(LABELS.c.id)
            )
            return [Label(**row._mapping) for row in rows]

    async def latest_by_run(self) -> dict[str, Label]:
        """The newest label of every labelled run."""
        async with self._engine.connect() as conn:
            rows = await conn.execute(select(LABELS).order_by(LABELS.c.id))
            return {row.run_id: Label(**row._mapping) for row in rows}

    async def ok_attributions(
        self, *, since_ns: int | None = None
    ) -> list[tuple[str, str, str, int, int]]:
        """(run id, method, agent, step, created_at) of every ok attribution."""
        statement = select(
            ATTRIBUTIONS.c.run_id,
            ATTRIBUTIONS.c.method,
            ATTRIBUTIONS.c.agent,
            ATTRIBUTIONS.c.step,
            ATTRIBUTIONS.c.created_at,
        ).where(ATTRIBUTIONS.c.status == "ok")
        if since_ns is not None:
            statement = statement.where(ATTRIBUTIONS.c.created_at >= since_ns)
        async with self._engine.connect() as conn:
            return [tuple(row) for row in await conn.execute(statement.order_by(ATTRIBUTIONS.c.id))]  # type: ignore[misc]
