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
from dataclasses import dataclass, field
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
from faultfinder.attributors.learned.training import (
    DEFAULT_GRID,
    FeatureCache,
    ModelConfig,
    TrainingOptions,
    batch_scores,
    first_alarm,
    record_folds,
    tune_and_fit,
)
from faultfinder.attributors.model import Attribution, Trajectory
from faultfinder.attributors.scoring import (
    DEFAULT_TOLERANCES,
    OVERALL,
    ScoredRecord,
    aggregate,
    score_attribution,
    spread,
)
from faultfinder.benchmarks.cv_report import cv_table, render_cv_report
from faultfinder.benchmarks.datasets import BenchmarkRecord
from faultfinder.benchmarks.run import attribution_progress, random_baseline
from faultfinder.benchmarks.train import require_training_packages

__all__ = [
    "CVSettings",
    "FoldOutcome",
    "HeldOutRecord",
    "cross_validate",
    "cross_validate_command",
    "fold_plan",
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
    return _summarise(records, settings, held_out, folds_done, time.perf_counter() - started)


def _sync(heuristic: FirstError, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
    import anyio

    async def run() -> Attribution:
        return await heuristic.attribute(trajectory, options)

    return anyio.run(run)


# --- summary ---------------------------------------------------------------------------


def _accuracy_over_seeds(
    per_seed: dict[int, list[ScoredRecord]],
) -> dict[str, dict[str, Any]]:
    aggregated = {seed: aggregate(scored) for seed, scored in per_seed.items()}
    first = next(iter(aggregated.values()))
    result: dict[str, dict[str, Any]] = {}
    for subset in first:
        accuracy: dict[str, Any] = {}
        for metric in first[subset].accuracy:
            values = [aggregated[seed][subset].accuracy[metric] for seed in aggregated]
            accuracy[metric] = {**spread(values), "values": values}
        result[subset] = {"n": first[subset].n, "accuracy": accuracy}
    return result


def _by_subset(outcomes: Sequence[HeldOutRecord]) -> dict[str, list[HeldOutRecord]]:
    groups: dict[str, list[HeldOutRecord]] = {}
    for outcome in outcomes:
        groups.setdefault(outcome.record.subset, []).append(outcome)
    result = {name: groups[name] for name in sorted(groups)}
    result[OVERALL] = list(outcomes)
    return result


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _conformal_stats(outcomes: Sequence[HeldOutRecord], alpha: float) -> dict[str, float]:
    usable = [o for o in outcomes if alpha in o.covered]
    return {
        "coverage": _mean([float(o.covered[alpha]) for o in usable]),
        "removed": _mean([o.removed[alpha] for o in usable]),
        "n": float(len(usable)),
    }


def _auditor_stats(outcomes: Sequence[HeldOutRecord], k_values: Sequence[int]) -> dict[str, float]:
    alarmed = [o for o in outcomes if o.alarm_step is not None]
    stats: dict[str, float] = {
        "alarm_rate": len(alarmed) / len(outcomes) if outcomes else 0.0,
        "first_alarm_precision": _mean(
            [float(o.alarm_step == o.record.gold.step) for o in alarmed]
        ),
        "first_alarm_agent_precision": _mean(
            [
                float((o.alarm_agent or "").casefold() == o.record.gold.agent.casefold())
                for o in alarmed
            ]
        ),
        "mean_steps_before_end": _mean(
            [float(len(o.record.trajectory) - 1 - (o.alarm_step or 0)) for o in alarmed]
        ),
        "mean_fraction_before_end": _mean(
            [
                (len(o.record.trajectory) - 1 - (o.alarm_step or 0)) / len(o.record.trajectory)
                for o in alarmed
            ]
        ),
    }
    for k in k_values:
        stats[f"first_alarm_precision_pm{k}"] = _mean(
            [float(abs((o.alarm_step or 0) - o.record.gold.step) <= k) for o in alarmed]
        )
    return stats


def _over_seeds(per_seed: Sequence[dict[str, float]]) -> dict[str, dict[str, Any]]:
    keys = per_seed[0].keys() if per_seed else []
    return {key: {**spread([s[key] for s in per_seed]), "values": [s[key] for s in per_seed]}
            for key in keys}  # fmt: skip


def _summarise(
    records: Sequence[BenchmarkRecord],
    settings: CVSettings,
    held_out: dict[int, list[HeldOutRecord]],
    folds: Sequence[FoldOutcome],
    wall_time: float,
) -> dict[str, Any]:
    def scored(which: str) -> dict[int, list[ScoredRecord]]:
        return {
            seed: [
                ScoredRecord(
                    subset=o.record.subset,
                    score=score_attribution(
                        o.learned if which == "learned" else o.first_error,
                        o.record.gold.agent,
                        o.record.gold.step,
                        settings.tolerances,
                    ),
                    latency_s=(o.learned if which == "learned" else o.first_error).latency_s,
                )
                for o in outcomes
            ]
            for seed, outcomes in held_out.items()
        }

    learned = _accuracy_over_seeds(scored("learned"))
    first_error = _accuracy_over_seeds(scored("first_error"))
    expected = random_baseline(records)
    per_seed_groups = {seed: _by_subset(outcomes) for seed, outcomes in held_out.items()}
    subsets: dict[str, Any] = {}
    for name, entry in learned.items():
        conformal = {
            str(alpha): _over_seeds(
                [_conformal_stats(groups[name], alpha) for groups in per_seed_groups.values()]
            )
            for alpha in settings.alphas
        }
        auditor = _over_seeds(
            [
                _auditor_stats(groups[name], settings.tolerances)
                for groups in per_seed_groups.values()
            ]
        )
        subsets[name] = {
            **entry,
            "failed": {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0, "values": []},
            "cost": {"mean_llm_calls": 0.0, "mean_prompt_tokens": 0.0,
                     "mean_completion_tokens": 0.0,
                     "mean_latency_s": _mean([o.learned.latency_s
                                              for groups in per_seed_groups.values()
                                              for o in groups[name]])},
            "random_expected": expected.get(name, {"agent": 0.0, "step": 0.0}),
            "first_error": first_error[name]["accuracy"],
            "conformal": conformal,
            "auditor": auditor,
        }  # fmt: skip
    return {
        "dataset": ",".join(sorted({r.dataset for r in records})),
        "attributor": "learned",
        "mode": "cross-validation",
        "error_modes": _by_error_mode(held_out),
        "records": [
            {
                "id": o.record.record_id,
                "seed": seed,
                "subset": o.record.subset,
                "error_mode": o.record.gold.mode,
                "gold": [o.record.gold.agent, o.record.gold.step],
                "learned": [o.learned.agent, o.learned.step],
                "first_error": [o.first_error.agent, o.first_error.step],
            }
            for seed, outcomes in held_out.items()
            for o in outcomes
        ],
        "settings": {**settings.as_dict(), "repeats": len(settings.seeds)},
        "wall_time_s": wall_time,
        "subsets": subsets,
        "folds": [
            {
                "seed": f.seed,
                "fold": f.fold,
                "n_train": len(f.train_ids),
                "test_ids": list(f.test_ids),
                "chosen": f.chosen,
            }
            for f in folds
        ],
    }


def _by_error_mode(held_out: dict[int, list[HeldOutRecord]]) -> dict[str, dict[str, Any]]:
    """Held-out accuracy per labelled error mode (records without one under "-"), as the
    mean over seeds: which modes the attributors find and which they do not."""
    table: dict[str, dict[str, Any]] = {}
    seeds = len(held_out) or 1
    for outcomes in held_out.values():
        for o in outcomes:
            entry = table.setdefault(
                o.record.gold.mode or "-",
                {"n": 0, "learned": {"agent": 0.0, "step": 0.0},
                 "first_error": {"agent": 0.0, "step": 0.0}},
            )  # fmt: skip
            entry["n"] += 1
            for name, attribution in (("learned", o.learned), ("first_error", o.first_error)):
                score = score_attribution(attribution, o.record.gold.agent, o.record.gold.step)
                entry[name]["agent"] += float(score.agent)
                entry[name]["step"] += float(score.step)
    for entry in table.values():
        for name in ("learned", "first_error"):
            for metric in ("agent", "step"):
                entry[name][metric] /= entry["n"]
        entry["n"] //= seeds
    return dict(sorted(table.items()))


# --- command line -------------------------------------------------------------

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
    Console().print(cv_table(summary))
    click.echo(f"wrote {out_dir / 'summary.json'}, {out_dir / 'report.md'}")
