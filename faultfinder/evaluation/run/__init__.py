"""`faultfinder bench run`: run an attributor over a labelled dataset, score it and write a report.

`run_benchmark` (`benchmark`) is the reusable core: records in, summary out, results.jsonl
appended as records finish, resumable (`checkpoint`). `attribution` attributes and scores
the records, `summary` sums the result lines up, `selection` picks the records, `models`
sets up the model side and `command` is the click command.
"""

from faultfinder.evaluation.run.attribution import (
    BenchmarkSettings,
    RecordOutcome,
    attribute_records,
    random_baseline,
)
from faultfinder.evaluation.run.benchmark import run_benchmark
from faultfinder.evaluation.run.checkpoint import (
    IDENTITY_FIELDS,
    RESULTS_FILE,
    RUN_FILE,
    ResumeMismatch,
    read_results,
)
from faultfinder.evaluation.run.command import run_command
from faultfinder.evaluation.run.progress import attribution_progress
from faultfinder.evaluation.run.summary import summarise_results

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
