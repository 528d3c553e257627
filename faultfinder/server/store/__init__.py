"""The database, and the only code that runs SQL against it.

Each table has one owner here: `SpanStore` (spans, runs, attributions), `JobQueue`
(jobs), `LabelStore` (labels), `AlarmStore` (alarms) and `BenchHistory` (the nightly
benchmark's bench_runs and bench_history). The queue stores the
attribution that settles a job with the same statement the span store uses
(`attributions.insert_attribution`). The rest of the sidecar, the benchmarks and the
command line call these methods; none of them writes SQL of its own.
"""

from faultfinder.server.db.models import JobStatus, RunOutcome, RunStatus
from faultfinder.server.store.alarms import AlarmStore, StoredAlarm
from faultfinder.server.store.bench import (
    BenchEntry,
    BenchHistory,
    BenchRun,
    BenchVerdict,
    UnknownBenchEntryError,
)
from faultfinder.server.store.jobs import AUTO, Job, JobQueue
from faultfinder.server.store.labels import Label, LabelStore
from faultfinder.server.store.rows import InvalidCursorError, RunRow, UnknownRunError
from faultfinder.server.store.spans import SpanStore
from faultfinder.server.store.tables import RUNS

__all__ = [
    "AUTO",
    "RUNS",
    "AlarmStore",
    "BenchEntry",
    "BenchHistory",
    "BenchRun",
    "BenchVerdict",
    "InvalidCursorError",
    "Job",
    "JobQueue",
    "JobStatus",
    "Label",
    "LabelStore",
    "RunOutcome",
    "RunRow",
    "RunStatus",
    "SpanStore",
    "StoredAlarm",
    "UnknownBenchEntryError",
    "UnknownRunError",
]
