"""What a chaos drill finds in the database afterwards: every query the drills make
against it, read straight with SQL so that the sidecar's own accounting is not trusted."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import make_url

from faultfinder.benchmarks.chaos.traffic import SpanKey
from faultfinder.server.db.engine import create_engine

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


async def read_stored_state(database_url: str) -> StoredState:
    """Read spans, runs, jobs and attributions straight from the database."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            spans = {
                (row[0], row[1])
                for row in await conn.execute(text("SELECT trace_id, span_id FROM spans"))
            }
            runs = Counter(row[0] for row in await conn.execute(text("SELECT status FROM runs")))
            failed = {
                row[0]
                for row in await conn.execute(
                    text("SELECT id FROM runs WHERE status IN ('failed', 'attributed')")
                )
            }
            job_rows = (
                await conn.execute(text("SELECT run_id, attributor, status, attempts FROM jobs"))
            ).all()
            attributions = Counter(
                (row[0], row[1])
                for row in await conn.execute(text("SELECT run_id, method FROM attributions"))
            )
    finally:
        await engine.dispose()
    return StoredState(
        spans=spans,
        runs_by_status=dict(runs),
        jobs_by_status=dict(Counter(row[2] for row in job_rows)),
        jobs_attempts=[row[3] for row in job_rows],
        failed_runs=failed,
        attributions=attributions,
        jobs=Counter((row[0], row[1]) for row in job_rows if row[0] is not None),
    )


async def stored_span_count(database_url: str) -> int:
    """How many spans the database holds (0 when it has no schema yet)."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            return int((await conn.execute(text("SELECT count(*) FROM spans"))).scalar_one())
    except Exception:  # no schema yet: empty
        return 0
    finally:
        await engine.dispose()


def redacted(database_url: str) -> str:
    """`database_url` with its password masked, for reports and messages."""
    return make_url(database_url).render_as_string(hide_password=True)


async def run_span_count(database_url: str, run_id: str) -> int:
    """How many spans the database holds for the run `run_id`."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            query = text("SELECT count(*) FROM spans WHERE run_id = :run_id")
            return int((await conn.execute(query, {"run_id": run_id})).scalar_one())
    finally:
        await engine.dispose()
