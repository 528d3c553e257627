"""Benchmark dataset loaders: each record becomes a `Trajectory` plus its gold label.

`load_dataset(spec)` reads a whole dataset (`loading`); `who_and_when` and
`who_and_when_pro` read one file each. The field-by-field mapping of every dataset is
documented in docs/datasets.md. `labelled` reads the runs a sidecar's users labelled,
`options` holds the dataset options every command shares and `command` is
`faultfinder dataset`. Training, the evaluation and failure injection all read them.
"""

from faultfinder.datasets.generic import (
    GENERIC_FORMAT,
    LABEL_SOURCES,
    STEP_ROLES,
    dump_record,
    load_generic_file,
    record_json,
    step_role,
    write_records,
)
from faultfinder.datasets.loading import (
    DATASET_SPECS,
    SPEC_HELP,
    check_spec,
    count_records,
    load_dataset,
)
from faultfinder.datasets.records import (
    DATASETS_DIR_ENV,
    WHO_AND_WHEN,
    WHO_AND_WHEN_PRO,
    BenchmarkRecord,
    DatasetError,
    GoldLabel,
    UnknownDatasetError,
    default_datasets_dir,
    resolve_datasets_dir,
)
from faultfinder.datasets.who_and_when import (
    MAGENTIC_ONE_ROSTER,
    WHO_AND_WHEN_FORMAT,
    load_who_and_when_format_record,
    load_who_and_when_record,
)
from faultfinder.datasets.who_and_when_pro import load_who_and_when_pro_record

__all__ = [
    "DATASETS_DIR_ENV",
    "DATASET_SPECS",
    "GENERIC_FORMAT",
    "LABEL_SOURCES",
    "MAGENTIC_ONE_ROSTER",
    "SPEC_HELP",
    "STEP_ROLES",
    "WHO_AND_WHEN",
    "WHO_AND_WHEN_FORMAT",
    "WHO_AND_WHEN_PRO",
    "BenchmarkRecord",
    "DatasetError",
    "GoldLabel",
    "UnknownDatasetError",
    "check_spec",
    "count_records",
    "default_datasets_dir",
    "dump_record",
    "load_dataset",
    "load_generic_file",
    "load_who_and_when_format_record",
    "load_who_and_when_pro_record",
    "load_who_and_when_record",
    "record_json",
    "resolve_datasets_dir",
    "step_role",
    "write_records",
]
