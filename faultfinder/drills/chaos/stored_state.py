"""What a chaos drill finds in the database afterwards, read through the store's own
read methods (`SpanStore.stored_contents`, `JobQueue.job_census`) rather than the
sidecar's counters, so that the sidecar's own accounting is not trusted."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy.engine import make_url

from faultfinder.drills.chaos.traffic import SpanKey
from faultfinder.server.composition import span_store_for
from faultfinder.server.db.engine import create_engine
from faultfinder.server.store import JobQueue, SpanStore

__all__ = [
    "StoredState",
    "read_stored_state",
    "redacted",
    "run_span_count",
    "stored_span_count",
]


@dataclass
class StoredState:
    """What the database holds after a chaos run."""

    spans: set[SpanKey]
    runs_by_status: dict[str, int]
    jobs_by_status: dict[str, int]
    jobs_attempts: list[int]
    """`attempts` of every job."""
    failed_runs: set[str]
    """Runs that failed (status failed or attributed)."""
    attributions: Counter[tuple[str, str]]
    """(run id, method) → attributions stored."""
    jobs: Counter[tuple[str, str]]
    """(run id, attributor) → jobs."""


@asynccontextmanager
async def _store(database_url: str) -> AsyncIterator[SpanStore]:
    """A span store on its own engine, closed and disposed at exit."""
    engine = create_engine(database_url)
    store = span_store_for(engine)
    try:
        yield store
    finally:
        await store.aclose()
        await engine.dispose()


async def read_stored_state(database_url: str) -> StoredState:
    """Read spans, runs, jobs and attributions straight from the database."""
    async with _store(database_url) as store:
        contents = await store.stored_contents()
        jobs = JobQueue(store.engine, record_attribution=store.record_attribution)
        job_rows = await jobs.job_census()
    return StoredState(
        spans=contents.span_keys,
        runs_by_status=dict(contents.runs_by_status),
        jobs_by_status=dict(Counter(row[2] for row in job_rows)),
        jobs_attempts=[row[3] for row in job_rows],
        failed_runs=contents.failed_runs,
        attributions=contents.attributions,
        jobs=Counter((row[0], row[1]) for row in job_rows if row[0] is not None),
    )


async def stored_span_count(database_url: str) -> int:
    """How many spans the database holds (0 when it has no schema yet)."""
    async with _store(database_url) as store:
        try:
            return await store.count_spans()
        except Exception:  # no schema yet (or no database): empty
            return 0


def redacted(database_url: str) -> str:
    """`database_url` with its password masked, for reports and messages."""
    return make_url(database_url).render_as_string(hide_password=True)


async def run_span_count(database_url: str, run_id: str) -> int:
    """How many spans the database holds for the run `run_id`."""
    async with _store(database_url) as store:
        return await store.count_run_spans(run_id)
