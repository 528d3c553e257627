"""Benchmark dataset loaders: each record becomes a `Trajectory` plus its gold label.

`load_dataset(spec)` reads a whole dataset (`loading`); `who_and_when` and
`who_and_when_pro` read one file each. The field-by-field mapping of every dataset is
documented in docs/datasets.md.
"""

from faultfinder.benchmarks.datasets.loading import DATASET_SPECS, count_records, load_dataset
from faultfinder.benchmarks.datasets.records import (
    DATASETS_DIR_ENV,
    WHO_AND_WHEN,
    WHO_AND_WHEN_PRO,
    BenchmarkRecord,
    DatasetError,
    GoldLabel,
    default_datasets_dir,
    resolve_datasets_dir,
)
from faultfinder.benchmarks.datasets.who_and_when import (
    MAGENTIC_ONE_ROSTER,
    load_who_and_when_record,
)
from faultfinder.benchmarks.datasets.who_and_when_pro import load_who_and_when_pro_record

__all__ = [
    "DATASETS_DIR_ENV",
    "DATASET_SPECS",
    "MAGENTIC_ONE_ROSTER",
    "WHO_AND_WHEN",
    "WHO_AND_WHEN_PRO",
    "BenchmarkRecord",
    "DatasetError",
    "GoldLabel",
    "count_records",
    "default_datasets_dir",
    "load_dataset",
    "load_who_and_when_pro_record",
    "load_who_and_when_record",
    "resolve_datasets_dir",
]
