"""Dataset specs and their files: which record files a spec names, in which order, and
which reader turns each file into `BenchmarkRecord`s.

A spec is a named dataset (`who_and_when`, `who_and_when:hand-crafted`,
`who_and_when_pro`), a path (a generic JSON Lines file, or a folder of them, or a folder
of Who&When-format JSON files from any system), or several of those joined by commas.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from faultfinder.datasets.generic import load_generic_file
from faultfinder.datasets.records import (
    DATASETS_DIR_ENV,
    WHO_AND_WHEN,
    WHO_AND_WHEN_PRO,
    BenchmarkRecord,
    DatasetError,
    UnknownDatasetError,
    resolve_datasets_dir,
)
from faultfinder.datasets.who_and_when import (
    WHO_AND_WHEN_FOLDERS,
    load_who_and_when_format_record,
    load_who_and_when_record,
    record_number,
)
from faultfinder.datasets.who_and_when_pro import (
    PRO_TRACES,
    load_who_and_when_pro_record,
)

DATASET_SPECS: tuple[str, ...] = (
    WHO_AND_WHEN,
    f"{WHO_AND_WHEN}:algorithm-generated",
    f"{WHO_AND_WHEN}:hand-crafted",
    WHO_AND_WHEN_PRO,
)
"""Every named spec `load_dataset` accepts (besides paths)."""

SPEC_HELP = (
    f"{', '.join(DATASET_SPECS)}; or a path: a generic JSON Lines file (.jsonl), a folder"
    " of them, or a folder of Who&When-format JSON files; several joined by commas"
)
"""What a `--dataset` option takes, for help texts and errors."""

GENERIC_SUFFIX = ".jsonl"


@dataclass(frozen=True)
class _Source:
    path: Path
    count: Callable[[], int]
    read: Callable[[], Iterator[BenchmarkRecord]]


def load_dataset(
    spec: str, root: str | os.PathLike[str] | None = None
) -> Iterator[BenchmarkRecord]:
    """Records of `spec` (see the module's docstring), in the order of its parts.

    The spec and the dataset folders are checked at call time; each file is read and
    validated as the iterator reaches it.
    """
    sources = _sources(spec, root)
    return (record for source in sources for record in source.read())


def count_records(spec: str, root: str | os.PathLike[str] | None = None) -> int:
    """How many records `load_dataset(spec, root)` yields (files are counted, generic
    files' non-blank lines too, without parsing them)."""
    return sum(source.count() for source in _sources(spec, root))


def check_spec(spec: str, root: str | os.PathLike[str] | None = None) -> None:
    """Raise `DatasetError` unless `spec` names datasets that exist."""
    _sources(spec, root)


def _sources(spec: str, root: str | os.PathLike[str] | None) -> list[_Source]:
    parts = [part.strip() for part in spec.split(",") if part.strip()]
    if not parts:
        raise UnknownDatasetError(f"empty dataset spec {spec!r}; valid: {SPEC_HELP}")
    sources: list[_Source] = []
    for part in parts:
        sources.extend(_part_sources(part, root))
    return sources


def _part_sources(part: str, root: str | os.PathLike[str] | None) -> list[_Source]:
    name, _, subset = part.lower().partition(":")
    if name == WHO_AND_WHEN and (not subset or subset in WHO_AND_WHEN_FOLDERS):
        base = resolve_datasets_dir(root)
        subsets = [subset] if subset else list(WHO_AND_WHEN_FOLDERS)
        files: list[_Source] = []
        for each in subsets:
            folder = base / WHO_AND_WHEN / WHO_AND_WHEN_FOLDERS[each]
            files.extend(
                _single(path, _who_and_when_loader(each))
                for path in sorted(_json_files(folder), key=record_number)
            )
        return files
    if name == WHO_AND_WHEN_PRO and not subset:
        folder = resolve_datasets_dir(root) / PRO_TRACES
        return [_single(path, load_who_and_when_pro_record) for path in _json_files(folder)]
    path = Path(part)
    if path.is_file():
        return [_generic(path)]
    if path.is_dir():
        return _folder_sources(path)
    raise UnknownDatasetError(
        f"unknown dataset spec {part!r} (no such named dataset, file or folder); valid: {SPEC_HELP}"
    )


def _folder_sources(folder: Path) -> list[_Source]:
    generic = sorted(p for p in folder.glob(f"*{GENERIC_SUFFIX}") if p.is_file())
    if generic:
        return [_generic(path) for path in generic]
    files = sorted(_json_files(folder), key=_file_order)
    if not files:
        raise DatasetError(
            f"{folder}: no {GENERIC_SUFFIX} files (generic format) nor .json files"
            " (Who&When format) in this folder"
        )
    subset = folder.name
    return [_single(path, lambda p: load_who_and_when_format_record(p, subset)) for path in files]


def _file_order(path: Path) -> tuple[int, int, str]:
    """Numbered files (`12.json`) in number order, then the others by name."""
    return (0, int(path.stem), "") if path.stem.isdigit() else (1, 0, path.stem)


def _single(path: Path, load: Callable[[Path], BenchmarkRecord]) -> _Source:
    return _Source(path, lambda: 1, lambda: iter((load(path),)))


def _generic(path: Path) -> _Source:
    def count() -> int:
        with path.open("rb") as handle:
            return sum(1 for line in handle if line.strip())

    return _Source(path, count, lambda: load_generic_file(path))


def _who_and_when_loader(subset: str) -> Callable[[Path], BenchmarkRecord]:
    return lambda path: load_who_and_when_record(path, subset)


def _json_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise DatasetError(
            f"{folder}: dataset folder not found (pass the datasets root or set {DATASETS_DIR_ENV})"
        )
    return sorted(path for path in folder.glob("*.json") if path.is_file())
