"""Labelled runs as the training algorithm reads them, and their folds.

A labelled record (`LabelledRecord`: a trajectory with its gold step and agent;
`faultfinder.datasets.BenchmarkRecord` is one) becomes a `RunMatrix` of
feature rows once per ground-truth use and prefix-only setting (`FeatureCache`). Folds
are stratified by subset and keep the runs of one task together (`stratified_folds`).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from faultfinder.attributors.learned.blame import answerable_agents, blameable
from faultfinder.attributors.learned.features import run_features, shows_evidence
from faultfinder.attributors.learned.step_model import trajectory_group
from faultfinder.attributors.model import Trajectory

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "FOLDS_BY",
    "FeatureCache",
    "GoldStep",
    "LabelledRecord",
    "RunMatrix",
    "record_folds",
    "stratified_folds",
    "task_key",
]


class GoldStep(Protocol):
    """The labelled culprit of a failed run."""

    @property
    def agent(self) -> str: ...

    @property
    def step(self) -> int:
        """0-based index into the trajectory's steps."""
        ...


class LabelledRecord(Protocol):
    """One labelled failed run, as training reads it."""

    @property
    def record_id(self) -> str: ...

    @property
    def subset(self) -> str: ...

    @property
    def trajectory(self) -> Trajectory: ...

    @property
    def gold(self) -> GoldStep: ...


@dataclass(frozen=True)
class RunMatrix:
    """One labelled run as model input: feature rows, gold step and agent, step owners."""

    record_id: str
    subset: str
    group: str | None
    rows: np.ndarray
    gold_step: int
    gold_agent: str
    agents: tuple[str, ...]
    """The agent that answers for each step (`learned.answerable_agents`)."""
    blameable: tuple[bool, ...]
    """Steps the attributor may blame (`learned.blameable`); the others get no probability."""
    task: str = ""
    """`task_key` of the record: runs of one task share a fold in inner CV."""
    alarmable: tuple[bool, ...] = ()
    """Steps an early alarm may be raised on: blameable and showing evidence of an error
    (`features.shows_evidence`); empty for whole-run matrices."""


class FeatureCache:
    """Feature matrices per (record, ground-truth use, prefix-only), computed once."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, bool, bool], RunMatrix] = {}

    def matrix(
        self, record: LabelledRecord, *, use_ground_truth: bool, prefix_only: bool
    ) -> RunMatrix:
        import numpy as np

        key = (record.record_id, use_ground_truth, prefix_only)
        if key not in self._cache:
            trajectory = record.trajectory
            features = run_features(
                trajectory,
                use_ground_truth=use_ground_truth and trajectory.ground_truth is not None,
                prefix_only=prefix_only,
            )
            rows = features.rows
            mask = blameable(trajectory.steps, trajectory.declared_roster)
            self._cache[key] = RunMatrix(
                record_id=record.record_id,
                subset=record.subset,
                group=trajectory_group(trajectory),
                rows=np.asarray(rows, dtype=np.float64),
                gold_step=record.gold.step,
                gold_agent=record.gold.agent,
                agents=tuple(answerable_agents(trajectory.steps, trajectory.declared_roster)),
                blameable=tuple(mask),
                task=task_key(trajectory),
                alarmable=tuple(
                    ok and shows_evidence(row) for ok, row in zip(mask, features.named, strict=True)
                )
                if prefix_only
                else (),
            )
        return self._cache[key]

    def matrices(
        self, records: Sequence[LabelledRecord], *, use_ground_truth: bool, prefix_only: bool
    ) -> list[RunMatrix]:
        return [
            self.matrix(r, use_ground_truth=use_ground_truth, prefix_only=prefix_only)
            for r in records
        ]


def stratified_folds(
    subsets: Sequence[str], k: int, seed: int, tasks: Sequence[str] | None = None
) -> list[list[int]]:
    """Indices 0..len(subsets)-1 split into `k` disjoint folds, each subset spread evenly.

    Within each subset the order is shuffled with `seed` and dealt round-robin, starting
    where the previous subset stopped so that fold sizes differ by at most one.

    `tasks` (one key per record, see `task_key`) keeps records of the same task in one
    fold: Who&When asks 42 of its questions in both subsets, and a model must not be
    scored on a question whose other run it trained on. A record whose task already has
    a fold joins it; every other record goes to the fold with the fewest records of its
    subset, looking from the round-robin position on, and within a subset the records of
    repeated tasks are dealt first so that they spread evenly too. A task with more
    records than a fold holds (k folds of n records: more than n // k) is a template,
    not a repeated question, and its records are dealt one by one. Without repeated
    tasks the folds are exactly the round-robin ones.
    """
    if k < 2:
        raise ValueError(f"need at least 2 folds, got {k}")
    if k > len(subsets):
        raise ValueError(f"{k} folds need at least {k} records, got {len(subsets)}")
    if tasks is not None and len(tasks) != len(subsets):
        raise ValueError(f"{len(tasks)} task keys for {len(subsets)} records")
    rng = random.Random(seed)
    folds: list[list[int]] = [[] for _ in range(k)]
    by_subset: dict[str, list[int]] = {}
    for index, subset in enumerate(subsets):
        by_subset.setdefault(subset, []).append(index)
    # The task each record shares a fold with, if any. A task with more runs than a fold
    # holds is a template (one prompt, many inputs), not a question asked twice: its runs
    # are dealt like distinct tasks.
    tied: list[str | None] = [None] * len(subsets)
    if tasks is not None:
        counts = Counter(tasks)
        tied = [task if 1 < counts[task] <= len(subsets) // k else None for task in tasks]
    fold_of_task: dict[str, int] = {}
    cursor = 0
    for subset in sorted(by_subset):
        members = by_subset[subset]
        rng.shuffle(members)
        # Deal the repeated tasks first, so that they too spread evenly over the folds (and
        # their later runs, which must follow, do not pile up in one fold); stable, so
        # without repeated tasks the order is the shuffle's.
        members.sort(key=lambda i: tied[i] is None)
        in_subset = [0] * k
        for index in members:
            task = tied[index]
            if task is not None and task in fold_of_task:
                fold = fold_of_task[task]
            else:
                fewest = min(in_subset)
                fold = next(
                    f for f in ((cursor + j) % k for j in range(k)) if in_subset[f] == fewest
                )
                cursor = fold + 1
                if task is not None:
                    fold_of_task[task] = fold
            folds[fold].append(index)
            in_subset[fold] += 1
    return [sorted(fold) for fold in folds]


def task_key(trajectory: Trajectory) -> str:
    """What makes two records the same task for fold splitting: the task text, with
    case and runs of whitespace ignored."""
    return " ".join(trajectory.task.split()).casefold()


FOLDS_BY = "task"
"""What `record_folds` keeps together; recorded where out-of-fold results are stored."""


def record_folds(records: Sequence[LabelledRecord], k: int, seed: int) -> list[list[int]]:
    """The k folds (record positions) of labelled records: stratified by subset, the runs
    of one task (`task_key`) together. The one split of the outer CV and the pre-filter."""
    return stratified_folds(
        [record.subset for record in records],
        k,
        seed,
        [task_key(record.trajectory) for record in records],
    )
