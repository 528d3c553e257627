"""The database, and the only code that runs SQL against it.

Each table has one owner here, the only class that writes it:

    SpanStore      spans, runs (their status too) and attributions
    JobQueue       jobs
    LabelStore     labels
    AlarmStore     alarms
    BenchHistory   the nightly benchmark's bench_runs and bench_history

Settling a job and storing its attribution is one transaction: `JobQueue` writes the job
and hands its connection to the span store's `record_attribution` (wired by
`faultfinder/server/composition.py`), which inserts the attribution and moves the run to
`attributed`. The rest of the sidecar, the evaluation, the drills and the command line call these
methods; none of them writes SQL of its own.
"""

from faultfinder.server.db.models import JobStatus, RunOutcome, RunStatus
from faultfinder.server.store.alarms import AlarmStore
from faultfinder.server.store.bench import (
    BenchEntry,
    BenchHistory,
    BenchRun,
    BenchVerdict,
    UnknownBenchEntryError,
)
from faultfinder.server.store.contents import StoredContents
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
    "StoredContents",
    "UnknownBenchEntryError",
    "UnknownRunError",
]
