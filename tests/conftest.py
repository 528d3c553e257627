"""Fixtures shared by every test folder: where the benchmark datasets are."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultfinder.datasets import (
    BenchmarkRecord,
    DatasetError,
    load_dataset,
    resolve_datasets_dir,
)


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    """The datasets root (`FAULTFINDER_DATASETS_DIR`, else `../shared/datasets`); tests that
    need Who&When skip, naming the folder, when it is not there."""
    root: Path = resolve_datasets_dir()
    if not (root / "who_and_when").is_dir():
        pytest.skip(f"Who&When data not found under {root} (set FAULTFINDER_DATASETS_DIR)")
    return root


@pytest.fixture(scope="session")
def who_and_when(datasets_dir: Path) -> list[BenchmarkRecord]:
    """All 184 Who&When records (both subsets)."""
    try:
        return list(load_dataset("who_and_when", datasets_dir))
    except DatasetError as exc:  # pragma: no cover - a broken checkout of the data
        pytest.fail(str(exc))
