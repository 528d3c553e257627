"""The tables this package owns, and what every statement on them shares.

Only `faultfinder.server.store` runs SQL against these tables: the span store (spans,
runs, attributions), the job queue (jobs), the label store (labels), the alarm store
(alarms) and the benchmark history (bench_runs, bench_history). Everything else calls
their methods.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from faultfinder.server.db.models import (
    AlarmTable,
    AttributionTable,
    BenchHistoryTable,
    BenchRunTable,
    JobTable,
    LabelTable,
    RunTable,
    SpanTable,
)

__all__ = [
    "ALARMS",
    "ATTRIBUTIONS",
    "BENCH_HISTORY",
    "BENCH_RUNS",
    "JOBS",
    "LABELS",
    "RUNS",
    "SPANS",
    "clean",
    "insert_for",
]

SPANS: Table = SpanTable.__table__  # type: ignore[attr-defined]
RUNS: Table = RunTable.__table__  # type: ignore[attr-defined]
ATTRIBUTIONS: Table = AttributionTable.__table__  # type: ignore[attr-defined]
JOBS: Table = JobTable.__table__  # type: ignore[attr-defined]
LABELS: Table = LabelTable.__table__  # type: ignore[attr-defined]
ALARMS: Table = AlarmTable.__table__  # type: ignore[attr-defined]
BENCH_RUNS: Table = BenchRunTable.__table__  # type: ignore[attr-defined]
BENCH_HISTORY: Table = BenchHistoryTable.__table__  # type: ignore[attr-defined]


def insert_for(engine: AsyncEngine) -> Any:
    """The dialect's `insert` (with `on_conflict_do_*`); SQLite and PostgreSQL only."""
    dialect = engine.dialect.name
    if dialect == "sqlite":
        return sqlite.insert
    if dialect == "postgresql":
        return postgresql.insert
    raise ValueError(f"the store supports sqlite and postgresql, not {dialect!r}")


def clean(text: str) -> str:
    """`text` storable as it is: PostgreSQL text cannot hold NUL, and one such span must
    not block its whole batch."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def clean_text(value: object) -> str | None:
    """A value as stored text (None for None or empty)."""
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return clean(text) if text else None


def now_ns() -> int:
    return time.time_ns()
