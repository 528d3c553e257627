"""Everything the database holds, read whole: what a chaos drill compares with what it
sent and what the sidecar acknowledged, without trusting the sidecar's own counters.

`SpanStore.stored_contents` and `SpanStore.count_run_spans` read the spans, runs and
attributions; `JobQueue.job_census` reads the jobs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from faultfinder.server.db.models import RunStatus
from faultfinder.server.store.tables import ATTRIBUTIONS, JOBS, RUNS, SPANS

__all__ = ["StoredContents", "count_run_spans", "job_census", "stored_contents"]

_FAILED = (RunStatus.FAILED.value, RunStatus.ATTRIBUTED.value)


@dataclass(frozen=True)
class StoredContents:
    """The spans, runs and attributions a database holds."""

    span_keys: set[tuple[str, str]]
    """(trace id, span id) of every stored span."""
    runs_by_status: Counter[str]
    failed_runs: set[str]
    """Runs that failed (status failed or attributed)."""
    attributions: Counter[tuple[str, str]]
    """(run id, method) → attributions stored."""


async def stored_contents(engine: AsyncEngine) -> StoredContents:
    """Every span key, run status and attribution of the database, in one connection."""
    async with engine.connect() as conn:
        spans = {
            (row[0], row[1])
            for row in await conn.execute(select(SPANS.c.trace_id, SPANS.c.span_id))
        }
        runs = (await conn.execute(select(RUNS.c.id, RUNS.c.status))).all()
        attributions = Counter(
            (row[0], row[1])
            for row in await conn.execute(select(ATTRIBUTIONS.c.run_id, ATTRIBUTIONS.c.method))
        )
    return StoredContents(
        span_keys=spans,
        runs_by_status=Counter(row[1] for row in runs),
        failed_runs={row[0] for row in runs if row[1] in _FAILED},
        attributions=attributions,
    )


async def count_run_spans(engine: AsyncEngine, run_id: str) -> int:
    """How many spans the database holds for the run `run_id`."""
    statement = select(func.count()).select_from(SPANS).where(SPANS.c.run_id == run_id)
    async with engine.connect() as conn:
        count: int = (await conn.execute(statement)).scalar_one()
    return count


async def job_census(engine: AsyncEngine) -> list[tuple[str | None, str, str, int]]:
    """(run id, attributor, status, attempts) of every job."""
    statement = select(JOBS.c.run_id, JOBS.c.attributor, JOBS.c.status, JOBS.c.attempts)
    async with engine.connect() as conn:
        return [(row[0], row[1], row[2], row[3]) for row in await conn.execute(statement)]
