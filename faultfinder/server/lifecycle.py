"""The run lifecycle: when a running run becomes `complete` or `failed`.

Rules (applied by `sweep`, which a daemon calls every few seconds):

- A `running` run finishes when an outcome was posted for it (at once), when its root
  span ended in ERROR and its outcome attribute says `failure` (`declared_failed`: what
  the SDK's `r.fail()` sends; at once), or when its root span has ended and no new span
  arrived for the quiet period. The root is the span without a parent, or whose parent
  is in another process (OTLP span flags). Spans that arrive after a run finished at
  once are stored and shown with it; its attributions stand as made (re-attribute
  through the API to include them), as for a posted outcome: an exporter sends a
  run's children before the root that ends after them, so they are rarely late.
- A run with only orphan spans (its root has not arrived) finishes after the quiet
  period measured from its last span when nothing says where the root is (a lost root
  must not keep a run open forever). When its spans' sender says their parents are in
  the same process (`local_parent`), the root is still open there (a long model call)
  or was lost with its process: the run finishes `failed` at the quiet period if its
  spans already say so, else waits `unfinished_after` from its last span and is then
  finished `failed` and marked `unfinished` (a crash or a kill that ended no span, a
  hang), unless an outcome says success.
- It finishes `failed` when its outcome is `failure`, or when no outcome is known and
  a root span ended with status ERROR, or the run's work ended in an error
  (`work_failed`: an exception escaped the agents, even if the root says OK, or the
  root never arrived); otherwise `complete`. An error the agents recovered from (a tool
  error fed back, then more work that ended well) does not fail the run by itself; it
  stays in the trajectory as evidence. An explicit outcome (span attribute or posted)
  wins over the spans' statuses: a graded success is a success.
- A `complete` run whose outcome later turns `failure` (posted late, or a late span
  says so) becomes `failed`. Runs never go back to `running`, and `failed` /
  `attributed` runs are not changed here.

The returned transitions tell the caller which runs to hand to attribution.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from faultfinder.reading.model import SpanRecord, StatusCode
from faultfinder.server.settings import DEFAULT_UNFINISHED_AFTER_S
from faultfinder.server.store import RunOutcome, RunRow, RunStatus, SpanStore

__all__ = [
    "DEFAULT_UNFINISHED_AFTER_S",
    "RunTransition",
    "awaits_root",
    "decide",
    "declared_failed",
    "is_failure",
    "sweep",
    "work_failed",
]


@dataclass(frozen=True, slots=True)
class RunTransition:
    """A run that changed status in a sweep."""

    run_id: str
    previous: RunStatus
    status: RunStatus


def work_failed(spans: Sequence[SpanRecord]) -> bool:
    """The run's work ended in an error: some span other than the root has status ERROR
    and no childless span outside it ended after it without an error.

    So an exception that escaped (the failing call, then only the spans around it ending,
    whatever status the root gives itself) fails the run, and so does an error after which
    nothing else arrived (a root that never came); an error the agents went on from (a
    tool error fed back to the model, whose next call ended well) does not.
    """
    keys = {(span.trace_id, span.span_id) for span in spans}
    parent_of = {
        (span.trace_id, span.span_id): (span.trace_id, span.parent_span_id)
        for span in spans
        if span.parent_span_id is not None and (span.trace_id, span.parent_span_id) in keys
    }
    parents = set(parent_of.values())
    errors = [
        span
        for span in spans
        if span.status_code == StatusCode.ERROR and span.parent_span_id is not None
    ]
    if not errors:
        return False
    leaves = [
        span
        for span in spans
        if (span.trace_id, span.span_id) not in parents and span.parent_span_id is not None
    ]

    def within(span: SpanRecord, error: SpanRecord) -> bool:
        key: tuple[str, str | None] | None = (span.trace_id, span.span_id)
        seen: set[tuple[str, str | None]] = set()
        while key is not None and key not in seen:
            if key == (error.trace_id, error.span_id):
                return True
            seen.add(key)
            key = parent_of.get(key)  # type: ignore[arg-type]
        return False

    return any(
        not any(
            leaf.end_time_unix_nano > error.end_time_unix_nano
            and leaf.status_code != StatusCode.ERROR
            and not within(leaf, error)
            for leaf in leaves
        )
        for error in errors
    )


def is_failure(run: RunRow, *, work_failed: bool = False) -> bool:
    """The run failed by its outcome, or (no outcome known) by its root span's status or
    because its work ended in an error (`work_failed` of its spans)."""
    if run.outcome is not None:
        return bool(run.outcome == RunOutcome.FAILURE)
    return bool(run.root_error or (run.work_error and work_failed))


def awaits_root(run: RunRow) -> bool:
    """No root has arrived, and the run's spans say it is in their own process: it is
    still open there, or was lost with that process."""
    return run.root_span_id is None and run.local_parent


def declared_failed(run: RunRow) -> bool:
    """The run said itself that it failed: its root span ended with status ERROR and its
    outcome attribute is `failure` (the SDK's `r.fail()`). Nothing is left to wait for."""
    return bool(
        run.root_span_id is not None
        and run.root_ended
        and run.root_error
        and run.outcome == RunOutcome.FAILURE
    )


def decide(
    run: RunRow,
    *,
    now_ns: int,
    quiet_period_ns: int,
    unfinished_after_ns: int = int(DEFAULT_UNFINISHED_AFTER_S * 1e9),
    work_failed: bool = False,
) -> RunStatus | None:
    """The status `run` should move to now, or None to leave it as it is; `work_failed`
    is that function's answer for the run's spans. A run moved to `failed` because its
    root never came (`awaits_root`, past `unfinished_after_ns`, no outcome) is the one
    the sweep marks `unfinished`.

    The plain statement of the rules; the sweep has the database apply the same rules
    (`SpanStore.settle_due`, reading the spans only of runs with an error below the
    root), and the tests check that the two agree.
    """
    finished = RunStatus.FAILED if is_failure(run, work_failed=work_failed) else RunStatus.COMPLETE
    if run.status == RunStatus.RUNNING:
        if run.outcome_posted_at is not None or declared_failed(run):
            return finished
        quiet = run.last_span_received_at + quiet_period_ns <= now_ns
        if awaits_root(run):
            if run.last_span_received_at + unfinished_after_ns <= now_ns:
                return finished if run.outcome is not None else RunStatus.FAILED
            return finished if quiet and finished == RunStatus.FAILED else None
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
    unfinished_after_s: float = DEFAULT_UNFINISHED_AFTER_S,
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
    that run is settled (an outcome was posted for it). A run awaiting its root waits
    at least the quiet period, whatever `unfinished_after_s` says.
    """
    now_ns = int(now * 1e9)
    quiet_period_ns = int(quiet_period_s * 1e9)
    unfinished_after_ns = int(max(unfinished_after_s, quiet_period_s) * 1e9)
    deadline = time.monotonic() + budget_s
    transitions: list[RunTransition] = []
    while True:
        seen, moved = await _sweep_page(
            store,
            now_ns=now_ns,
            quiet_period_ns=quiet_period_ns,
            unfinished_after_ns=unfinished_after_ns,
            limit=limit,
            only=only,
        )
        transitions += moved
        if seen < limit or only is not None or time.monotonic() >= deadline:
            return transitions
        await asyncio.sleep(0)


async def _sweep_page(
    store: SpanStore,
    *,
    now_ns: int,
    quiet_period_ns: int,
    unfinished_after_ns: int,
    limit: int,
    only: str | None = None,
) -> tuple[int, list[RunTransition]]:
    """Settle up to `limit` due runs (and as many changed complete runs) in one
    transaction; returns the larger page's size and the transitions.

    The database applies `decide`'s rules itself (`SpanStore.settle_due`): no run is
    read into Python, which is what let a writer storing thousands of tiny runs per
    second starve the sweep of event-loop time.
    """
    quiet_since = now_ns - quiet_period_ns
    unfinished_since = now_ns - unfinished_after_ns
    seen, moved, pending = await store.settle_due(
        quiet_since=quiet_since,
        unfinished_since=unfinished_since,
        now=now_ns,
        limit=limit,
        only=only,
    )
    transitions = [RunTransition(run_id, previous, status) for run_id, previous, status in moved]
    # The runs with an error below an ordinary root: their spans say whether it ended the
    # work. Few runs have one; their spans are read in one query.
    spans = await store.spans_of_runs([run_id for run_id, _ in pending])
    for run_id, awaiting_since in pending:
        failed = work_failed(spans.get(run_id, []))
        if awaiting_since is not None and not failed:
            # Recovered from; its root is still to come (or `unfinished_after`).
            await store.mark_recovered(run_id, last_span_received_at=awaiting_since)
            continue
        status = RunStatus.FAILED if failed else RunStatus.COMPLETE
        if await store.finish_checked(
            run_id,
            status,
            quiet_since=quiet_since,
            unfinished_since=unfinished_since,
            now=now_ns,
        ):
            transitions.append(RunTransition(run_id, RunStatus.RUNNING, status))
    return seen, transitions
