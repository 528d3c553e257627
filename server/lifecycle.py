"""The run lifecycle: when a running run becomes `complete` or `failed`.

Rules (applied by `sweep`, which a daemon calls every few seconds):

- A `running` run finishes when an outcome was posted for it (at once), or when its
  root span has ended and no new span arrived for the quiet period. A run with only
  orphan spans (its root never arrived) finishes after the quiet period measured
  from its last span: a lost root must not keep a run open forever.
- It finishes `failed` when its outcome is `failure`, or when no outcome is known and
  a root span ended with status ERROR, or the run's last work did: the latest-ending
  span other than the root has status ERROR (an exception escaped the agents, even if
  the root says OK, or the root never arrived); otherwise `complete`. An error the
  agents recovered from (a tool error fed back, then more work that ended well) does not
  fail the run by itself; it stays in the trajectory as evidence. An explicit outcome
  (span attribute or posted) wins over the spans' statuses: a graded success is a
  success.
- A `complete` run whose outcome later turns `failure` (posted late, or a late span
  says so) becomes `failed`. Runs never go back to `running`, and `failed` /
  `attributed` runs are not changed here.

The returned transitions tell the caller which runs to hand to attribution.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from faultfinder.server.store import RunOutcome, RunRow, RunStatus, SpanStore

__all__ = ["RunTransition", "decide", "is_failure", "sweep"]


@dataclass(frozen=True, slots=True)
class RunTransition:
    """A run that changed status in a sweep."""

    run_id: str
    previous: RunStatus
    status: RunStatus


def is_failure(run: RunRow) -> bool:
    """The run failed by its outcome, or (no outcome known) by its root span's status or
    the status of its last work."""
    if run.outcome is not None:
        return bool(run.outcome == RunOutcome.FAILURE)
    return bool(run.root_error or run.work_error)


def decide(run: RunRow, *, now_ns: int, quiet_period_ns: int) -> RunStatus | None:
    """The status `run` should move to now, or None to leave it as it is.

    The plain statement of the rules; the sweep has the database apply the same rules
    (`SpanStore.settle_due`), and the tests check that the two agree.
    """
    finished = RunStatus.FAILED if is_failure(run) else RunStatus.COMPLETE
    if run.status == RunStatus.RUNNING:
        if run.outcome_posted_at is not None:
            return finished
        quiet = run.last_span_received_at + quiet_period_ns <= now_ns
        root_done = run.root_span_id is None or run.root_ended
        return finished if quiet and root_done else None
    if run.status == RunStatus.COMPLETE and finished == RunStatus.FAILED:
        return RunStatus.FAILED
    return None


async def sweep(
    store: SpanStore,
    *,
    now: float,
    quiet_period_s: float,
    limit: int = 1000,
    budget_s: float = 1.0,
    only: str | None = None,
) -> list[RunTransition]:
    """Move the runs that are due and return the transitions.

    `now` is Unix seconds (wall clock, as recorded when spans are stored). Runs are
    settled `limit` at a time, each page in its own short transaction, with the event
    loop (and so the span writer) given its turn between pages; pages follow each
    other while full, for about `budget_s` seconds. So a backlog of thousands of small
    runs is worked off in one call instead of one page per sweep interval, without
    holding SQLite's single write lock long enough to stall ingest. With `only`, just
    that run is settled (an outcome was posted for it).
    """
    now_ns = int(now * 1e9)
    quiet_period_ns = int(quiet_period_s * 1e9)
    deadline = time.monotonic() + budget_s
    transitions: list[RunTransition] = []
    while True:
        seen, moved = await _sweep_page(
            store, now_ns=now_ns, quiet_period_ns=quiet_period_ns, limit=limit, only=only
        )
        transitions += moved
        if seen < limit or only is not None or time.monotonic() >= deadline:
            return transitions
        await asyncio.sleep(0)


async def _sweep_page(
    store: SpanStore, *, now_ns: int, quiet_period_ns: int, limit: int, only: str | None = None
) -> tuple[int, list[RunTransition]]:
    """Settle up to `limit` due runs (and as many changed complete runs) in one
    transaction; returns the larger page's size and the transitions.

    The database applies `decide`'s rules itself (`SpanStore.settle_due`): no run is
    read into Python, which is what let a writer storing thousands of tiny runs per
    second starve the sweep of event-loop time.
    """
    seen, moved = await store.settle_due(
        quiet_since=now_ns - quiet_period_ns, now=now_ns, limit=limit, only=only
    )
    return seen, [RunTransition(run_id, previous, status) for run_id, previous, status in moved]
