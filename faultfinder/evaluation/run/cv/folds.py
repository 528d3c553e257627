"""The outer folds of the cross-validation and what it records: its settings
(`CVSettings`), how records are split into folds (`fold_plan`, by task or by framework),
and what one fold and one held-out record came to (`FoldOutcome`, `HeldOutRecord`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from faultfinder.attributors.model import Attribution
from faultfinder.attributors.scoring import (
    DEFAULT_TOLERANCES,
)
from faultfinder.datasets import BenchmarkRecord
from faultfinder.training import (
    DEFAULT_GRID,
    ModelConfig,
    record_folds,
)

__all__ = [
    "GROUPINGS",
    "CVSettings",
    "FoldOutcome",
    "HeldOutRecord",
    "fold_plan",
    "framework_of",
]


@dataclass(frozen=True)
class CVSettings:
    """How the cross-validation runs; recorded in the summary."""

    folds: int = 5
    seeds: tuple[int, ...] = (0, 1, 2)
    use_ground_truth: bool = True
    grid: tuple[ModelConfig, ...] = DEFAULT_GRID
    inner_folds: int = 3
    alphas: tuple[float, ...] = (0.1, 0.2)
    tolerances: tuple[int, ...] = DEFAULT_TOLERANCES
    group_by: str = "task"
    """`task`: k folds, a task's runs together; `framework`: one fold per framework (each
    framework held out whole, the others trained on)."""
    also_trained_on: str | None = None
    """What every fold also trained on (never scored), for the summary."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "group_by": self.group_by,
            "also_trained_on": self.also_trained_on,
            "folds": self.folds,
            "seeds": list(self.seeds),
            "use_ground_truth": self.use_ground_truth,
            "grid": [config.label() for config in self.grid],
            "inner_folds": self.inner_folds,
            "alphas": list(self.alphas),
            "tolerances": list(self.tolerances),
        }


@dataclass(frozen=True)
class HeldOutRecord:
    """One record scored by a model that never saw it."""

    record: BenchmarkRecord
    seed: int
    fold: int
    learned: Attribution
    first_error: Attribution
    covered: dict[float, bool]
    """alpha -> the prediction set holds the gold step."""
    removed: dict[float, float]
    """alpha -> share of the run's steps outside the prediction set."""
    alarm_step: int | None
    alarm_agent: str | None


@dataclass(frozen=True)
class FoldOutcome:
    """What one outer fold did: which records it trained on and what it chose."""

    seed: int
    fold: int
    train_ids: tuple[str, ...]
    test_ids: tuple[str, ...]
    chosen: dict[str, Any] = field(default_factory=dict)


GROUPINGS = ("task", "framework")


def framework_of(record: BenchmarkRecord) -> str:
    """The framework a record's run came from (its subset when the run names none)."""
    framework = record.trajectory.metadata.get("framework")
    return framework if isinstance(framework, str) and framework else record.subset


def fold_plan(
    records: Sequence[BenchmarkRecord], k: int, seed: int, group_by: str = "task"
) -> list[list[int]]:
    """The outer folds (record positions) for one seed: disjoint, covering every record.
    By `task`, k folds with a task's runs together; by `framework`, one fold per
    framework, in name order (k and the seed do not apply)."""
    if group_by == "framework":
        by_framework: dict[str, list[int]] = {}
        for position, record in enumerate(records):
            by_framework.setdefault(framework_of(record), []).append(position)
        return [by_framework[name] for name in sorted(by_framework)]
    if group_by != "task":
        raise ValueError(f"group_by must be one of {GROUPINGS}, got {group_by!r}")
    folds: list[list[int]] = record_folds(records, k, seed)
    return folds
