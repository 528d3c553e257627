"""The lifecycle's statements: settle the runs that are due, in the database.

`faultfinder.server.lifecycle` decides what a run's status becomes; these statements
apply those rules to a page of runs at a time without reading them into Python.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, and_, case, false, func, not_, or_, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faultfinder.server.db.models import RunOutcome, RunStatus
from faultfinder.server.store.tables import RUNS

__all__ = ["finish_checked", "mark_attributed", "mark_recovered", "settle_due"]


async def settle_due(
    engine: AsyncEngine,
    *,
    quiet_since: int,
    unfinished_since: int,
    now: int,
    limit: int = 1000,
    only: str | None = None,
) -> tuple[int, list[tuple[str, RunStatus, RunStatus]], list[tuple[str, int | None]]]:
    """Apply the lifecycle rules (`lifecycle.decide`) to one page of runs, in the
    database, in one short transaction.

    Finishes up to `limit` `running` runs that are due (an outcome was posted, or the
    run declared itself failed (`lifecycle.declared_failed`), or no
    new span since `quiet_since` (Unix ns) and no open root span; a run awaiting its
    root (`lifecycle.awaits_root`) at `quiet_since` only if it failed, else at
    `unfinished_since`, then marked `unfinished`), oldest activity first, as `failed`
    or `complete`; and re-checks up to `limit` `complete` runs that
    changed since the last sweep, failing those whose outcome now says failure.
    Each is one `UPDATE … WHERE id IN (page) … RETURNING` statement, atomic under
    SQLite's write lock; on PostgreSQL the page is locked (`SKIP LOCKED`) and the
    conditions are checked again on the row being written. So a span stored
    meanwhile keeps its run as the span left it, and two sweepers (replicas) never
    both move a run. No run is read into Python. Returns how many runs the larger of
    the two pages held (a full page means more may be waiting), the transitions
    (run id, from, to), and the due runs the database cannot decide: no outcome, a
    root that did not fail, and an error below it, which may have ended the work or
    been recovered from, each with, if it awaits its root, when its last span was
    received (recovered from, it stays running: `mark_recovered`); the caller reads
    their spans (`finish_checked`). With `only`, the pages hold at most that run.
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
    due = and_(RUNS.c.status == running, _finished(quiet_since, unfinished_since))
    changed = and_(RUNS.c.needs_sweep == true(), RUNS.c.status == complete)
    # Past `unfinished_since` a run awaiting its root fails whatever its spans say (an
    # error that ended its work failed it at the quiet period already).
    timed_out = and_(_awaits_root(), RUNS.c.last_span_received_at <= unfinished_since)
    unfinished = and_(timed_out, RUNS.c.outcome.is_(None))
    undecided_now = and_(undecided, not_(timed_out))
    decided = and_(due, not_(undecided_now))
    due_page = select(RUNS.c.id).where(decided).order_by(RUNS.c.last_span_received_at).limit(limit)
    # A run awaiting its root whose spans were found recovered from is read again only
    # once another span arrived.
    unchecked = func.coalesce(RUNS.c.recovered_checked_at, -1) != RUNS.c.last_span_received_at
    awaiting_since = case((_awaits_root(), RUNS.c.last_span_received_at), else_=None)
    pending_page = select(RUNS.c.id, awaiting_since.label("awaiting_since"))
    pending_page = pending_page.where(due, undecided_now, unchecked).limit(limit)
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
    if engine.dialect.name == "postgresql":
        due_page = due_page.with_for_update(skip_locked=True)
        changed_page = changed_page.with_for_update(skip_locked=True)
        recheck_due, recheck_changed = (decided,), (changed,)
    finish = (
        update(RUNS)
        .where(RUNS.c.id.in_(due_page.scalar_subquery()), *recheck_due)
        .values(
            status=case((failure, failed), (unfinished, failed), else_=complete),
            unfinished=unfinished,
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
    async with engine.begin() as conn:
        finished = (await conn.execute(finish)).all()
        rechecked = (await conn.execute(recheck)).all()
        pending = [(row.id, row.awaiting_since) for row in await conn.execute(pending_page)]
    transitions = [(row.id, RunStatus.RUNNING, RunStatus(row.status)) for row in finished]
    transitions += [
        (row.id, RunStatus.COMPLETE, RunStatus.FAILED) for row in rechecked if row.status == failed
    ]
    return max(len(finished), len(rechecked), len(pending)), transitions, pending


async def finish_checked(
    engine: AsyncEngine,
    run_id: str,
    status: RunStatus,
    *,
    quiet_since: int,
    unfinished_since: int,
    now: int,
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
            _finished(quiet_since, unfinished_since),
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
    async with engine.begin() as conn:
        return (await conn.execute(statement)).first() is not None


async def mark_recovered(engine: AsyncEngine, run_id: str, *, last_span_received_at: int) -> None:
    """Note that the spans of a run awaiting its root, as of `last_span_received_at`, show
    only errors recovered from: `settle_due` leaves it out until another span arrives."""
    statement = (
        update(RUNS)
        .where(
            RUNS.c.id == run_id,
            RUNS.c.status == RunStatus.RUNNING.value,
            RUNS.c.last_span_received_at == last_span_received_at,
        )
        .values(recovered_checked_at=last_span_received_at)
    )
    async with engine.begin() as conn:
        await conn.execute(statement)


async def mark_attributed(conn: AsyncConnection, run_id: str, *, now: int) -> None:
    """Move a `failed` run to `attributed` on `conn` (in the caller's transaction); a run
    in any other status keeps it."""
    await conn.execute(
        update(RUNS)
        .where(RUNS.c.id == run_id, RUNS.c.status == RunStatus.FAILED.value)
        .values(status=RunStatus.ATTRIBUTED.value, updated_at=now, version=RUNS.c.version + 1)
    )


def _awaits_root() -> ColumnElement[bool]:
    """`lifecycle.awaits_root`: no root yet, and the spans say it is in their process."""
    return and_(RUNS.c.root_span_id.is_(None), RUNS.c.local_parent == true())


def _finished(quiet_since: int, unfinished_since: int) -> ColumnElement[bool]:
    """A running run is due: an outcome was posted, or it declared itself failed
    (`lifecycle.declared_failed`), or no span arrived since
    `quiet_since` (Unix ns) and its root, if it has one, has ended; a run awaiting its
    root is due then only if its spans may say it failed, else once no span arrived
    since `unfinished_since`."""
    quiet = RUNS.c.last_span_received_at <= quiet_since
    # No root has arrived, so no root error: a failure is the outcome's or the work's.
    may_have_failed = or_(
        RUNS.c.outcome == RunOutcome.FAILURE.value,
        and_(RUNS.c.outcome.is_(None), RUNS.c.work_error == true()),
    )
    return or_(
        and_(
            quiet,
            # A root that never ends keeps its run open; leaving such runs out keeps them
            # from crowding due runs past `limit`.
            or_(
                and_(RUNS.c.root_span_id.is_(None), RUNS.c.local_parent == false()),
                RUNS.c.root_ended_at > 0,
            ),
        ),
        and_(quiet, _awaits_root(), may_have_failed),
        and_(_awaits_root(), RUNS.c.last_span_received_at <= unfinished_since),
        RUNS.c.outcome_posted_at.is_not(None),
        # `lifecycle.declared_failed`: the root ended in ERROR with a `failure` outcome.
        and_(
            RUNS.c.root_ended_at > 0,
            RUNS.c.root_error == true(),
            RUNS.c.outcome == RunOutcome.FAILURE.value,
        ),
    )
