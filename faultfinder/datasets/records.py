"""What every dataset reader produces: a labelled failed run, its gold culprit, the error
for an unusable file, and where the datasets live on disk."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultfinder.attributors.model import Trajectory

DATASETS_DIR_ENV = "FAULTFINDER_DATASETS_DIR"

WHO_AND_WHEN = "who_and_when"
WHO_AND_WHEN_PRO = "who_and_when_pro"


class DatasetError(ValueError):
    """A dataset file is missing or malformed; the message names the file and the field."""


class UnknownDatasetError(DatasetError):
    """A dataset spec names no known dataset, file or folder."""


@dataclass(frozen=True)
class GoldLabel:
    """The labelled culprit of a failed run."""

    agent: str
    step: int
    """0-based index into the trajectory's steps."""
    reason: str = ""
    mode: str | None = None
    """Error-mode code or category when the dataset has one."""
    source: str = "dataset"
    """Who gave the label: `human` (a person), `injected` (controlled failure injection:
    exact by construction), `dataset` (a published dataset's annotation) or
    `counterfactual` (the earliest step whose correction, replayed, made the run succeed)."""


@dataclass(frozen=True)
class BenchmarkRecord:
    """One labelled failed run."""

    dataset: str
    """e.g. `who_and_when`, `who_and_when_pro`."""
    subset: str
    """e.g. `algorithm-generated`, `hand-crafted`, or the Pro framework name."""
    record_id: str
    """Unique within the dataset, e.g. `algorithm-generated/1`."""
    trajectory: Trajectory
    gold: GoldLabel
    details: Mapping[str, Any] = field(default_factory=dict)
    """What else the record carries (for an injected failure: the mode, the original and
    the injected text, the attempt)."""


def default_datasets_dir() -> Path:
    """`../shared/datasets` beside the checkout (or the working directory)."""
    here = Path(__file__).resolve().parents[2]
    for base in (Path.cwd(), here):
        candidate = base.parent / "shared" / "datasets"
        if candidate.is_dir():
            return candidate
    return Path.cwd().parent / "shared" / "datasets"


def resolve_datasets_dir(value: str | os.PathLike[str] | None = None) -> Path:
    """The dataset root: the argument, else $FAULTFINDER_DATASETS_DIR, else the default."""
    if value:
        return Path(value)
    env = os.environ.get(DATASETS_DIR_ENV)
    return Path(env) if env else default_datasets_dir()
