"""Out-of-fold step models for the LLM methods' learned pre-filter on Who&When.

The packaged learned model was trained on all of Who&When, so on Who&When its top-k
candidates would be hints from a model that has seen the very record it hints about, and
an LLM method's accuracy with those hints would be flattered. For a benchmark on Who&When
each record's hints therefore come from a model trained, exactly as `faultfinder train`
trains the packaged one (`tune_and_fit`), on the other folds only. Folds are by record
over all of Who&When (both subsets, like the packaged model's training data), stratified
by subset, with a fixed seed; the runs of one task share a fold, so no hint comes from a
model that trained on the same question in the other subset.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from faultfinder.attributors.learned import StepModel
from faultfinder.attributors.model import Trajectory
from faultfinder.datasets import BenchmarkRecord
from faultfinder.training import (
    DEFAULT_GRID,
    FeatureCache,
    ModelConfig,
    TrainingOptions,
    record_folds,
    tune_and_fit,
)

__all__ = ["FoldModels", "build_fold_models"]


@dataclass(frozen=True)
class FoldModels:
    """Per trajectory, the step model of the fold that held it out (a `PrefilterModel`)."""

    folds: int
    seed: int
    models: Mapping[int, StepModel]
    """Fold number -> the model trained without that fold (only folds that were needed)."""
    fold_of: Mapping[str, int]
    """Run id -> the fold holding that record out."""
    trained_on: Mapping[int, frozenset[str]]
    """Fold number -> the record ids its model was trained on."""

    def __call__(self, trajectory: Trajectory) -> StepModel:
        fold = self.fold_of.get(trajectory.run_id)
        if fold is None or fold not in self.models:
            raise ValueError(
                f"run {trajectory.run_id!r} has no out-of-fold pre-filter model: it is not one"
                " of the records the folds were built for"
            )
        return self.models[fold]

    def describe(self) -> dict[str, object]:
        return {"folds": self.folds, "seed": self.seed, "models_trained": len(self.models)}


def build_fold_models(
    everything: Sequence[BenchmarkRecord],
    needed: Sequence[BenchmarkRecord],
    *,
    folds: int = 5,
    seed: int = 0,
    use_ground_truth: bool = True,
    grid: Sequence[ModelConfig] = DEFAULT_GRID,
    inner_folds: int = 3,
    on_fold: Callable[[int, int], None] | None = None,
) -> FoldModels:
    """Train one model per fold of `everything` that holds out a record of `needed`.

    `needed` must be records of `everything` (same record ids). `on_fold(done, total)`
    reports progress; a fold takes seconds (LightGBM over a few thousand steps).
    """
    plan = record_folds(everything, folds, seed)
    position = {record.trajectory.run_id: i for i, record in enumerate(everything)}
    missing = [r.record_id for r in needed if r.trajectory.run_id not in position]
    if missing:
        raise ValueError(
            f"{len(missing)} records to attribute are not in the training data "
            f"(e.g. {missing[0]!r})"
        )
    fold_at = {i: number for number, fold in enumerate(plan) for i in fold}
    wanted = sorted({fold_at[position[r.trajectory.run_id]] for r in needed})
    cache = FeatureCache()
    models: dict[int, StepModel] = {}
    trained_on: dict[int, frozenset[str]] = {}
    for done, number in enumerate(wanted):
        if on_fold is not None:
            on_fold(done, len(wanted))
        held_out = set(plan[number])
        train = [record for i, record in enumerate(everything) if i not in held_out]
        options = TrainingOptions(
            grid=grid,
            inner_folds=inner_folds,
            seed=seed,
            use_ground_truth=use_ground_truth,
            auditor=False,
        )
        model = tune_and_fit(train, cache=cache, options=options)
        models[number] = replace(
            model,
            training={
                **model.training,
                "prefilter_source": (
                    f"out-of-fold model: fold {number + 1} of {folds} (seed {seed}), trained on"
                    f" {len(train)} records without this one"
                ),
            },
        )
        trained_on[number] = frozenset(record.record_id for record in train)
    if on_fold is not None:
        on_fold(len(wanted), len(wanted))
    fold_of = {
        record.trajectory.run_id: fold_at[position[record.trajectory.run_id]]
        for record in everything
    }
    return FoldModels(folds, seed, models, fold_of, trained_on)
