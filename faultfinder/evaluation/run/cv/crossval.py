"""Cross-validation of the `learned` attributor: train on k−1 folds, score only the held-out fold.

Folds are by record, stratified by subset, with fixed seeds, and the runs of one task
(Who&When asks 42 questions in both subsets) always share a fold; the agent rule, the
framework models, the temperatures, conformal thresholds and the auditor's alarm
threshold are all chosen inside the training folds (nested CV). The first-error
heuristic is scored on the same held-out folds for comparison. Training-fold accuracy is
never reported.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from faultfinder.attributors.base import AttributeOptions
from faultfinder.attributors.conformal import step_distribution
from faultfinder.attributors.heuristics import FirstError
from faultfinder.attributors.learned import (
    LearnedAttributor,
    StepModel,
    answerable_agents,
    trajectory_group,
)
from faultfinder.attributors.model import Attribution, Trajectory
from faultfinder.datasets import BenchmarkRecord
from faultfinder.evaluation.run.cv.folds import (
    CVSettings,
    FoldOutcome,
    HeldOutRecord,
    fold_plan,
    framework_of,
)
from faultfinder.evaluation.run.cv.report import cv_table, render_cv_report
from faultfinder.evaluation.run.cv.summary import summarise
from faultfinder.evaluation.run.progress import attribution_progress
from faultfinder.server.progress import table_console
from faultfinder.training import (
    FeatureCache,
    TrainingOptions,
    batch_scores,
    first_alarm,
    tune_and_fit,
)
from faultfinder.training.command import require_training_packages

__all__ = ["cross_validate", "cross_validate_command"]


def _withheld(trajectory: Trajectory, use_ground_truth: bool) -> Trajectory:
    if use_ground_truth or trajectory.ground_truth is None:
        return trajectory
    return trajectory.model_copy(update={"ground_truth": None})


def _held_out(
    record: BenchmarkRecord,
    model: StepModel,
    cache: FeatureCache,
    settings: CVSettings,
    seed: int,
    fold: int,
    first_error: Attribution,
) -> HeldOutRecord:
    trajectory = _withheld(record.trajectory, settings.use_ground_truth)
    options = AttributeOptions(use_ground_truth=settings.use_ground_truth, seed=seed)
    learned = LearnedAttributor(model).attribute_now(trajectory, options)
    n = len(trajectory)
    covered: dict[float, bool] = {}
    removed: dict[float, float] = {}
    if model.conformal is not None:
        probabilities = step_distribution(learned, n)
        for alpha in settings.alphas:
            interval = model.conformal.prediction_set(
                probabilities, alpha, trajectory_group(trajectory)
            )
            covered[alpha] = interval.lo <= record.gold.step <= interval.hi
            removed[alpha] = 1.0 - (interval.hi - interval.lo + 1) / n
    alarm_step: int | None = None
    alarm_agent: str | None = None
    auditor = model.auditor
    threshold = auditor.threshold_for(trajectory_group(trajectory)) if auditor is not None else None
    if auditor is not None and threshold is not None:
        prefix = cache.matrix(record, use_ground_truth=settings.use_ground_truth, prefix_only=True)
        alarm_step = first_alarm(
            [float(v) for v in batch_scores(auditor.scorer, prefix.rows)],
            threshold,
            prefix.alarmable or prefix.blameable,
        )
        if alarm_step is not None:
            alarm_agent = answerable_agents(trajectory.steps)[alarm_step]
    return HeldOutRecord(
        record=record,
        seed=seed,
        fold=fold,
        learned=learned,
        first_error=first_error,
        covered=covered,
        removed=removed,
        alarm_step=alarm_step,
        alarm_agent=alarm_agent,
    )


def cross_validate(
    records: Sequence[BenchmarkRecord],
    settings: CVSettings = CVSettings(),
    *,
    on_fold: Callable[[FoldOutcome], None] | None = None,
    also_train_on: Sequence[BenchmarkRecord] = (),
) -> dict[str, Any]:
    """Run the k-fold CV for every seed and return the summary (JSON-ready).

    The summary's `subsets` has the same shape as `run_benchmark`'s (accuracy metric
    -> mean/std/min/max/values over seeds), plus `first_error` on the same folds,
    `conformal` and `auditor` per subset, and `folds` listing what each fold trained on.
    """
    started = time.perf_counter()
    cache = FeatureCache()
    heuristic = FirstError()
    baseline: dict[str, Attribution] = {}
    for record in records:
        trajectory = _withheld(record.trajectory, settings.use_ground_truth)
        options = AttributeOptions(use_ground_truth=settings.use_ground_truth)
        baseline[record.record_id] = _sync(heuristic, trajectory, options)

    held_out: dict[int, list[HeldOutRecord]] = {}
    folds_done: list[FoldOutcome] = []
    for seed in settings.seeds:
        outcomes: list[HeldOutRecord] = []
        plan = fold_plan(records, settings.folds, seed, settings.group_by)
        for fold, test_positions in enumerate(plan):
            test = set(test_positions)
            train = [r for i, r in enumerate(records) if i not in test] + list(also_train_on)
            training = TrainingOptions(
                grid=settings.grid,
                inner_folds=settings.inner_folds,
                seed=seed,
                use_ground_truth=settings.use_ground_truth,
            )
            model = tune_and_fit(train, cache=cache, options=training)
            outcome = FoldOutcome(
                seed=seed,
                fold=fold,
                train_ids=tuple(r.record_id for r in train),
                test_ids=tuple(records[i].record_id for i in test_positions),
                chosen={
                    "configs": model.training.get("configs"),
                    "agent_rule": model.agent_rule,
                    "groups": model.training.get("group_choices"),
                    "alarm_threshold": model.auditor.alarm_threshold if model.auditor else None,
                    "alarm_thresholds": dict(model.auditor.alarm_thresholds)
                    if model.auditor
                    else None,
                },
            )
            if set(outcome.train_ids) & set(outcome.test_ids):
                raise AssertionError("a held-out record was in the training folds")
            for i in test_positions:
                record = records[i]
                outcomes.append(
                    _held_out(
                        record, model, cache, settings, seed, fold, baseline[record.record_id]
                    )
                )
            folds_done.append(outcome)
            if on_fold is not None:
                on_fold(outcome)
        held_out[seed] = outcomes
    return summarise(records, settings, held_out, folds_done, time.perf_counter() - started)


def _sync(heuristic: FirstError, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
    import anyio

    async def run() -> Attribution:
        return await heuristic.attribute(trajectory, options)

    return anyio.run(run)


_TRAINABLE = ("learned",)


def cross_validate_command(
    records: Sequence[BenchmarkRecord],
    *,
    attributor: str,
    settings: CVSettings,
    out_dir: Path,
    as_json: bool,
    also_train_on: Sequence[BenchmarkRecord] = (),
) -> None:
    """`faultfinder bench run --cv K`: run the CV with progress, write summary.json and
    report.md to `out_dir`, print the table (or the JSON)."""
    if attributor not in _TRAINABLE:
        raise click.UsageError(
            f"--cv trains the attributor on each fold; only {', '.join(_TRAINABLE)} "
            f"is trainable, not {attributor!r}"
        )
    require_training_packages()
    folds, seeds = settings.folds, settings.seeds
    if settings.group_by == "framework":
        folds = len({framework_of(record) for record in records})
        settings = dataclasses.replace(settings, folds=folds)
        if folds < 2 and not also_train_on:
            raise click.BadParameter(
                "--group-by framework needs records of two frameworks or more (or --train-also)",
                param_hint="'--group-by'",
            )
    elif len(records) < folds:
        raise click.BadParameter(
            f"{folds} folds need at least {folds} records, got {len(records)}",
            param_hint="'--cv'",
        )
    stderr = Console(stderr=True)
    progress = attribution_progress(stderr)
    with progress:
        task = progress.add_task(
            f"{attributor}: {folds}-fold CV × {len(seeds)} seeds", total=folds * len(seeds)
        )
        summary = cross_validate(
            records,
            settings,
            on_fold=lambda _: progress.advance(task),
            also_train_on=also_train_on,
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    summary["out_dir"] = str(out_dir)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out_dir / "report.md").write_text(render_cv_report(summary), encoding="utf-8")
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    table_console().print(cv_table(summary))
    click.echo(f"wrote {out_dir / 'summary.json'}, {out_dir / 'report.md'}")
