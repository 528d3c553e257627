"""How the `learned` attributor's held-out accuracy grows with the number of labelled runs.

`faultfinder bench learning-curve` runs the task-grouped k-fold CV of `bench run --cv`,
but fits each outer fold's pooled ensemble (the shipped configuration: the four members
of `DEFAULT_GRID`, averaged) on a share of that fold's training runs only: 25, 50, 75 and
100 % of its tasks by default, a few random draws per share. Every held-out record is
scored by models that never saw it, at every share. Beside the held-out accuracy it
prints the same models' accuracy on the very runs they were fitted on, marked as such:
not an accuracy estimate, but the other half of a learning curve (a wide gap between the
two that narrows as runs are added says that more labelled runs, not new features, are
what the model lacks). `per_doubling` is the least-squares slope of held-out accuracy
against log2 of the training runs.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from faultfinder.attributors.learned import AgentRule
from faultfinder.attributors.scoring import OVERALL, spread
from faultfinder.attributors.scoring import spread_percent as pct
from faultfinder.datasets import BenchmarkRecord
from faultfinder.datasets.options import datasets_dir_option, from_database_option
from faultfinder.server.progress import Progress, table_console
from faultfinder.training import (
    DEFAULT_GRID,
    FeatureCache,
    RunMatrix,
    batch_scores,
    fit_ensemble,
    run_correct,
    stratified_folds,
)
from faultfinder.training.command import labelled_training_records, require_training_packages

__all__ = ["CurveSettings", "learning_curve", "learning_curve_command", "parse_shares"]

METRICS = ("step", "agent")


@dataclass(frozen=True)
class CurveSettings:
    folds: int = 5
    seeds: tuple[int, ...] = (0, 1, 2)
    shares: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    draws: int = 3
    """Random task samples per share below 1 (the full training folds need one)."""
    use_ground_truth: bool = True

    def draws_for(self, share: float) -> int:
        return 1 if share >= 1.0 else self.draws


def parse_shares(text: str) -> tuple[float, ...]:
    """`"0.25,0.5,1"` → (0.25, 0.5, 1.0); each share in (0, 1], at least one."""
    shares: list[float] = []
    for part in text.split(","):
        try:
            share = float(part)
        except ValueError:
            raise ValueError(f"{part.strip()!r} is not a number") from None
        if not 0.0 < share <= 1.0:
            raise ValueError(f"{share:g} is not in (0, 1]")
        shares.append(share)
    if not shares:
        raise ValueError("no share given")
    return tuple(sorted(set(shares)))


def _sample(train: Sequence[RunMatrix], share: float, rng: random.Random) -> list[RunMatrix]:
    """The training runs of a random `share` of their tasks (a task's runs stay together)."""
    if share >= 1.0:
        return list(train)
    tasks = sorted({run.task for run in train})
    keep = set(rng.sample(tasks, max(1, round(share * len(tasks)))))
    return [run for run in train if run.task in keep]


def _judge(runs: Sequence[RunMatrix], scorer: Any) -> dict[str, list[tuple[bool, bool]]]:
    """Per subset, (step right, agent right) of each run under `scorer`."""
    out: dict[str, list[tuple[bool, bool]]] = {}
    for run in runs:
        right = run_correct(run, list(batch_scores(scorer, run.rows)), AgentRule.TOP_STEP)
        out.setdefault(run.subset, []).append(right)
        out.setdefault(OVERALL, []).append(right)
    return out


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    if len(xs) < 2:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0


def _add_seed(
    per_subset: dict[str, dict[str, list[float]]], tallied: dict[str, dict[str, list[float]]]
) -> None:
    """Append one seed's accuracy (the mean over its held-out or fitted runs)."""
    for subset, slot in tallied.items():
        for metric, values in slot.items():
            per_subset.setdefault(subset, {}).setdefault(metric, []).append(
                sum(values) / len(values)
            )


def learning_curve(
    records: Sequence[BenchmarkRecord],
    settings: CurveSettings = CurveSettings(),
    *,
    on_fit: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """The curve as a JSON-ready summary (see the module docstring)."""
    started = time.perf_counter()
    runs = FeatureCache().matrices(
        records, use_ground_truth=settings.use_ground_truth, prefix_only=False
    )
    subsets = [*sorted({run.subset for run in runs}), OVERALL]
    # held[share][subset][metric] -> one accuracy per seed (draws averaged); same for fit
    held: dict[float, dict[str, dict[str, list[float]]]] = {}
    fit: dict[float, dict[str, dict[str, list[float]]]] = {}
    train_runs: dict[float, list[int]] = {share: [] for share in settings.shares}
    for seed in settings.seeds:
        folds = stratified_folds(
            [run.subset for run in runs], settings.folds, seed, [run.task for run in runs]
        )
        for share in settings.shares:
            draws = settings.draws_for(share)
            tally: dict[str, dict[str, list[float]]] = {}
            tally_fit: dict[str, dict[str, list[float]]] = {}
            for fold_number, fold in enumerate(folds):
                test = set(fold)
                train = [run for i, run in enumerate(runs) if i not in test]
                for draw in range(draws):
                    rng = random.Random(f"{seed}/{fold_number}/{share}/{draw}")
                    sample = _sample(train, share, rng)
                    if {run.record_id for run in sample} & {runs[i].record_id for i in fold}:
                        raise AssertionError("a held-out record was in the training sample")
                    train_runs[share].append(len(sample))
                    scorer = fit_ensemble(sample, DEFAULT_GRID, seed)
                    for target, judged in (
                        (tally, _judge([runs[i] for i in fold], scorer)),
                        (tally_fit, _judge(sample, scorer)),
                    ):
                        for subset, rights in judged.items():
                            slot = target.setdefault(subset, {m: [] for m in METRICS})
                            for m, metric in enumerate(METRICS):
                                slot[metric].extend(right[m] for right in rights)
                    if on_fit is not None:
                        on_fit()
            _add_seed(held.setdefault(share, {}), tally)
            _add_seed(fit.setdefault(share, {}), tally_fit)
    shares_out: list[dict[str, Any]] = []
    for share in settings.shares:
        shares_out.append(
            {
                "share": share,
                "train_runs": sum(train_runs[share]) / len(train_runs[share]),
                "held_out": {
                    s: {m: spread(v) for m, v in held[share][s].items()}
                    for s in subsets
                    if s in held[share]
                },
                "fit_on_training_runs": {
                    s: {m: spread(v) for m, v in fit[share][s].items()}
                    for s in subsets
                    if s in fit[share]
                },
            }
        )
    log_runs = [math.log2(entry["train_runs"]) for entry in shares_out]
    per_doubling = {
        s: {
            m: _slope(log_runs, [entry["held_out"][s][m]["mean"] for entry in shares_out])
            for m in METRICS
        }
        for s in subsets
    }
    return {
        "settings": {
            "folds": settings.folds,
            "seeds": list(settings.seeds),
            "shares": list(settings.shares),
            "draws": settings.draws,
            "use_ground_truth": settings.use_ground_truth,
            "model": [config.label() for config in DEFAULT_GRID],
            "folds_by": "task",
        },
        "records": {s: sum(1 for r in runs if s in (r.subset, OVERALL)) for s in subsets},
        "shares": shares_out,
        "per_doubling": per_doubling,
        "seconds": round(time.perf_counter() - started, 1),
    }


def _table(summary: dict[str, Any]) -> Table:
    table = Table(title="learned: held-out accuracy by training runs (fit: on its own runs)")
    for column in ("share", "train runs", "subset", "step %", "agent %", "fit step %"):
        table.add_column(column)
    for entry in summary["shares"]:
        for subset, metrics in entry["held_out"].items():
            table.add_row(
                f"{entry['share']:g}",
                f"{entry['train_runs']:.0f}",
                subset,
                pct(metrics["step"]),
                pct(metrics["agent"]),
                pct(entry["fit_on_training_runs"][subset]["step"]),
            )
    return table


@click.command(name="learning-curve")
@click.option(
    "--dataset", default="who_and_when", show_default=True,
    help="Labelled records (none: only those of --from-database).",
)  # fmt: skip
@click.option("--folds", type=click.IntRange(min=2), default=5, show_default=True)
@click.option(
    "--cv-seeds", type=click.IntRange(min=1), default=3, show_default=True,
    help="Fold splits with seeds S..S+N-1 (S = --seed).",
)  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--shares", default="0.25,0.5,0.75,1", show_default=True,
    help="Shares of each outer fold's training tasks to fit on, comma-separated, in (0, 1].",
)  # fmt: skip
@click.option(
    "--draws", type=click.IntRange(min=1), default=3, show_default=True,
    help="Random task samples per share below 1.",
)  # fmt: skip
@click.option("--with-ground-truth/--without-ground-truth", default=True, show_default=True)
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-out/learning-curve"), show_default=True,
    help="Directory for summary.json.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print only the summary JSON on stdout.")
@click.option("--no-progress", is_flag=True, help="No progress on stderr.")
@datasets_dir_option
@from_database_option
def learning_curve_command(
    dataset: str,
    folds: int,
    cv_seeds: int,
    seed: int,
    shares: str,
    draws: int,
    with_ground_truth: bool,
    out: Path,
    as_json: bool,
    no_progress: bool,
    datasets_dir: Path | None,
    database_url: str | None,
) -> None:
    """Held-out accuracy of the learned attributor against the number of labelled runs
    (Who&When's, or with --from-database a sidecar's own labelled runs as well)."""
    try:
        parsed = parse_shares(shares)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--shares'") from None
    require_training_packages()
    records, source, _ = labelled_training_records(dataset, datasets_dir, database_url)
    if len(records) < folds:
        raise click.BadParameter(
            f"{folds} folds need at least {folds} records, got {len(records)}",
            param_hint="'--folds'",
        )
    settings = CurveSettings(
        folds=folds,
        seeds=tuple(range(seed, seed + cv_seeds)),
        shares=parsed,
        draws=draws,
        use_ground_truth=with_ground_truth,
    )
    fits = len(settings.seeds) * folds * sum(settings.draws_for(s) for s in parsed)
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=no_progress,
    )
    with progress:
        task = progress.add_task("learned: learning curve fits", total=fits)
        summary = learning_curve(records, settings, on_fit=lambda: progress.advance(task))
    out.mkdir(parents=True, exist_ok=True)
    summary["dataset"] = source
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    table_console().print(_table(summary))
    click.echo(f"wrote {out / 'summary.json'}")
