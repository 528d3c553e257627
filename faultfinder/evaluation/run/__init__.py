"""`faultfinder bench run`: run an attributor over a labelled dataset, score it and write a report.

`run_benchmark` (`benchmark`) is the reusable core: records in, summary out, results.jsonl
appended as records finish, resumable (`checkpoint`). `attribution` attributes and scores
the records, `summary` sums the result lines up, `selection` picks the records, `models`
sets up the model side and `command` is the click command.
"""

from faultfinder.benchmarks.run.attribution import (
    BenchmarkSettings,
    RecordOutcome,
    attribute_records,
    random_baseline,
)
from faultfinder.benchmarks.run.benchmark import run_benchmark
from faultfinder.benchmarks.run.checkpoint import (
    IDENTITY_FIELDS,
    RESULTS_FILE,
    RUN_FILE,
    ResumeMismatch,
    read_results,
)
from faultfinder.benchmarks.run.command import run_command
from faultfinder.benchmarks.run.progress import attribution_progress
from faultfinder.benchmarks.run.summary import summarise_results

__all__ = [
    "IDENTITY_FIELDS",
    "RESULTS_FILE",
    "RUN_FILE",
    "BenchmarkSettings",
    "RecordOutcome",
    "ResumeMismatch",
    "attribute_records",
    "attribution_progress",
    "random_baseline",
    "read_results",
    "run_benchmark",
    "run_command",
    "summarise_results",
]
