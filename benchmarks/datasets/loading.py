"""Dataset specs and their files: which record files a spec names, in which order, and
which reader turns each file into a `BenchmarkRecord`."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from faultfinder.benchmarks.datasets.records import (
    DATASETS_DIR_ENV,
    WHO_AND_WHEN,
    WHO_AND_WHEN_PRO,
    BenchmarkRecord,
    DatasetError,
    resolve_datasets_dir,
)
from faultfinder.benchmarks.datasets.who_and_when import (
    WHO_AND_WHEN_FOLDERS,
    load_who_and_when_record,
    record_number,
)
from faultfinder.benchmarks.datasets.who_and_when_pro import (
    PRO_TRACES,
    load_who_and_when_pro_record,
)

DATASET_SPECS: tuple[str, ...] = (
    WHO_AND_WHEN,
    f"{WHO_AND_WHEN}:algorithm-generated",
    f"{WHO_AND_WHEN}:hand-crafted",
    WHO_AND_WHEN_PRO,
)
"""Every spec `load_dataset` accepts."""


@dataclass(frozen=True)
class _RecordFile:
    path: Path
    load: Callable[[Path], BenchmarkRecord]


def load_dataset(
    spec: str, root: str | os.PathLike[str] | None = None
) -> Iterator[BenchmarkRecord]:
    """Records of `spec`: `who_and_when`, `who_and_when:algorithm-generated`,
    `who_and_when:hand-crafted`, `who_and_when_pro`.

    The spec and the dataset folders are checked at call time; each file is read and
    validated as the iterator reaches it.
    """
    files = _record_files(spec, root)
    return (record_file.load(record_file.path) for record_file in files)


def count_records(spec: str, root: str | os.PathLike[str] | None = None) -> int:
    """How many records `load_dataset(spec, root)` yields, without reading them."""
    return len(_record_files(spec, root))


def _record_files(spec: str, root: str | os.PathLike[str] | None) -> list[_RecordFile]:
    base = resolve_datasets_dir(root)
    name, _, subset = spec.strip().lower().partition(":")
    if name == WHO_AND_WHEN and (not subset or subset in WHO_AND_WHEN_FOLDERS):
        subsets = [subset] if subset else list(WHO_AND_WHEN_FOLDERS)
        files: list[_RecordFile] = []
        for each in subsets:
            folder = base / WHO_AND_WHEN / WHO_AND_WHEN_FOLDERS[each]
            files.extend(
                _RecordFile(path, _who_and_when_loader(each))
                for path in sorted(_json_files(folder), key=record_number)
            )
        return files
    if name == WHO_AND_WHEN_PRO and not subset:
        folder = base / PRO_TRACES
        return [_RecordFile(path, load_who_and_when_pro_record) for path in _json_files(folder)]
    raise DatasetError(f"unknown dataset spec {spec!r}; valid specs: {', '.join(DATASET_SPECS)}")


def _who_and_when_loader(subset: str) -> Callable[[Path], BenchmarkRecord]:
    return lambda path: load_who_and_when_record(path, subset)


def _json_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise DatasetError(
            f"{folder}: dataset folder not found (pass the datasets root or set {DATASETS_DIR_ENV})"
        )
    return sorted(path for path in folder.glob("*.json") if path.is_file())
