"""A sidecar database's labelled runs as records for `faultfinder train`, `bench run` and
`faultfinder dataset export`.

Every labelled run (`POST /api/runs/{id}/labels`, the dashboard's button, or a kept
injected failure of `faultfinder inject run`)
becomes one record: its trajectory assembled from its stored spans as the attributors
saw it, with the newest label as the gold culprit. A label that no longer fits its run
(a step past the run's end) is skipped and reported, never guessed at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import inspect
from sqlalchemy.exc import SQLAlchemyError

from faultfinder.datasets import BenchmarkRecord, GoldLabel
from faultfinder.server.attribution import without_gold
from faultfinder.server.composition import span_store_for
from faultfinder.server.db.engine import create_engine, database_url
from faultfinder.server.store import LabelStore
from faultfinder.server.store.tables import LABELS
from faultfinder.server.trajectories import load_trajectory

__all__ = ["DATABASE_DATASET", "LabelledRuns", "LabelledRunsError", "labelled_records"]

DATABASE_DATASET = "database"
"""`BenchmarkRecord.dataset` of a labelled run read from a sidecar database."""

LIVE_SUBSET = "live"
"""The subset of a labelled run whose trace names no framework."""


class LabelledRunsError(RuntimeError):
    """The database cannot be read as a faultfinder database."""


def _shown(url: str) -> str:
    return repr(database_url(url).render_as_string(hide_password=True))


def _require_existing_file(url: str) -> None:
    """Refuse a SQLite URL naming no file, before opening it would create an empty one (a
    relative path is read from the current folder, easily the wrong one)."""
    parsed = database_url(url)
    where = parsed.database
    if parsed.get_backend_name() != "sqlite" or not where or where == ":memory:":
        return
    path = Path(where)
    if not path.is_file():
        raise LabelledRunsError(
            f"no database at {path.resolve()} ({_shown(url)}; a relative path is read from "
            f"the current folder, {Path.cwd()}): run from the sidecar's folder or give the "
            "file's absolute path, sqlite+aiosqlite:////path/to/faultfinder.db"
        )


@dataclass
class LabelledRuns:
    records: list[BenchmarkRecord] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """One line per labelled run left out, saying why."""


async def labelled_records(
    database_url: str, *, on_run: Callable[[int, int], None] | None = None
) -> LabelledRuns:
    """The labelled runs of the sidecar database at `database_url` (read only).

    `on_run(done, total)` is called after each labelled run.
    """
    _require_existing_file(database_url)
    engine = create_engine(database_url)
    out = LabelledRuns()
    try:
        store = span_store_for(engine)
        try:
            async with engine.connect() as conn:
                tables = await conn.run_sync(lambda sync: set(inspect(sync).get_table_names()))
            if LABELS.name not in tables:
                raise LabelledRunsError(
                    f"{_shown(database_url)} is not a faultfinder database (it has no "
                    f"`{LABELS.name}` table): name the sidecar's own database, or create its "
                    "schema with `faultfinder db upgrade`"
                )
            labels = await LabelStore(engine).latest_by_run()
        except SQLAlchemyError as exc:
            raise LabelledRunsError(
                f"cannot read labels from {_shown(database_url)} (is it a faultfinder database,"
                f" migrated with `faultfinder db upgrade`?): {exc.__class__.__name__}: "
                f"{str(exc).splitlines()[0]}"
            ) from None
        for done, (run_id, label) in enumerate(sorted(labels.items()), start=1):
            row = await store.get_run(run_id)
            if row is None:  # pragma: no cover - labels cascade with their run
                out.skipped.append(f"{run_id}: the run is gone")
                continue
            trajectory = without_gold(await load_trajectory(store, row))
            if not 0 <= label.step < len(trajectory):
                out.skipped.append(
                    f"{run_id}: labelled step {label.step} is outside its "
                    f"{len(trajectory)} stored steps"
                )
            else:
                framework = trajectory.metadata.get("framework")
                subset = framework if isinstance(framework, str) and framework else LIVE_SUBSET
                gold = GoldLabel(
                    agent=label.agent,
                    step=label.step,
                    reason=label.reason or "",
                    mode=label.mode,
                    source=label.source,
                )
                out.records.append(
                    BenchmarkRecord(
                        dataset=DATABASE_DATASET,
                        subset=subset,
                        record_id=f"{DATABASE_DATASET}/{run_id}",
                        trajectory=trajectory,
                        gold=gold,
                        details=label.details or {},
                    )
                )
            if on_run is not None:
                on_run(done, len(labels))
    finally:
        await engine.dispose()
    return out
