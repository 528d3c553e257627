"""Where the datasets' files are, markers that skip a test when they are absent, and
cached loads of them for the loader tests."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from faultfinder.datasets import (
    BenchmarkRecord,
    load_dataset,
    resolve_datasets_dir,
)

ROOT = resolve_datasets_dir()
WHO_AND_WHEN = ROOT / "who_and_when"
PRO_TRACES = ROOT / "who_and_when_pro" / "data" / "traces"

needs_who_and_when = pytest.mark.skipif(
    not WHO_AND_WHEN.is_dir(), reason=f"Who&When is not at {WHO_AND_WHEN}"
)
needs_pro = pytest.mark.skipif(
    not PRO_TRACES.is_dir(), reason=f"Who&When Pro samples are not at {PRO_TRACES}"
)


@cache
def records(spec: str) -> dict[str, BenchmarkRecord]:
    return {record.record_id: record for record in load_dataset(spec)}


def raw(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path
