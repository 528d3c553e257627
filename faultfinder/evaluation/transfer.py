"""`faultfinder bench transfer`: how attribution fares on frameworks it was not trained on.

Leave-one-framework-out on a labelled corpus of several frameworks (the injected corpus):
for each framework, the `learned` attributor is trained on the other frameworks (plus
`--train-also` records, e.g. Who&When) and scored on the held-out one; beside it, a model
trained on the `--train-also` records alone (the baseline that never saw the corpus),
`first_error` and the random baseline, on the same records. Accuracy is reported per
framework and per error mode. Nothing about a held-out framework is looked at before it
is scored: the features, the grid and every setting are fixed. Beside the summary,
`runs.jsonl` holds each run's label and every method's answer (learned: one per seed), to
read which runs a method misses.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import click
from rich.console import Console

from faultfinder.attributors.base import AttributeOptions
from faultfinder.attributors.heuristics import FirstError
from faultfinder.attributors.learned import LearnedAttributor
from faultfinder.attributors.model import Attribution
from faultfinder.attributors.scoring import score_attribution
from faultfinder.datasets import (
    SPEC_HELP,
    BenchmarkRecord,
    DatasetError,
    load_dataset,
    resolve_datasets_dir,
)
from faultfinder.datasets.options import datasets_dir_option
from faultfinder.evaluation.run import attribution_progress
from faultfinder.evaluation.run.cv.crossval import cross_validate
from faultfinder.evaluation.run.cv.folds import CVSettings, framework_of
from faultfinder.training import FeatureCache, TrainingOptions, tune_and_fit
from faultfinder.training.command import require_training_packages

__all__ = ["transfer", "transfer_command"]

METHODS = ("learned", "baseline", "first_error", "random")
"""The columns: learned (leave-one-framework-out), the model trained on the
`--train-also` records only, first_error, and the random baseline's expectation."""


def _score(attribution: Attribution | None, record: BenchmarkRecord) -> tuple[float, float]:
    score = score_attribution(attribution, record.gold.agent, record.gold.step)
    return float(score.agent), float(score.step)


def _mean_over_seeds(
    answers: Sequence[tuple[int, str | None, int | None]], record: BenchmarkRecord
) -> tuple[float, float]:
    """The mean (agent, step) correctness of one record's held-out answers over seeds."""
    scores = [
        _score(Attribution(method="learned", agent=agent, step=step), record)
        if agent is not None and step is not None
        else (0.0, 0.0)
        for _, agent, step in answers
    ]
    if not scores:
        return 0.0, 0.0
    return sum(a for a, _ in scores) / len(scores), sum(s for _, s in scores) / len(scores)


def _random(record: BenchmarkRecord) -> tuple[float, float]:
    agents = record.trajectory.roster or (record.gold.agent,)
    return 1.0 / len(agents), 1.0 / len(record.trajectory)


def transfer(
    corpus: Sequence[BenchmarkRecord],
    also: Sequence[BenchmarkRecord],
    *,
    seeds: tuple[int, ...] = (0, 1, 2),
    use_ground_truth: bool = True,
    on_fold: Any = None,
) -> dict[str, Any]:
    """The leave-one-framework-out summary (see the module's docstring)."""
    started = time.perf_counter()
    settings = CVSettings(
        folds=len({framework_of(r) for r in corpus}),
        seeds=seeds,
        use_ground_truth=use_ground_truth,
        group_by="framework",
    )
    lofo = cross_validate(corpus, settings, on_fold=on_fold, also_train_on=also)
    learned: dict[str, list[tuple[int, str | None, int | None]]] = defaultdict(list)
    for row in lofo["records"]:
        learned[row["id"]].append((row["seed"], *row["learned"]))
    baseline: dict[str, Attribution] = {}
    if also:
        model = tune_and_fit(
            list(also),
            cache=FeatureCache(),
            options=TrainingOptions(seed=seeds[0], use_ground_truth=use_ground_truth),
        )
        attributor = LearnedAttributor(model)
        options = AttributeOptions(use_ground_truth=use_ground_truth)
        for record in corpus:
            baseline[record.record_id] = attributor.attribute_now(record.trajectory, options)
    heuristic = FirstError()

    async def first_errors() -> dict[str, Attribution]:
        options = AttributeOptions(use_ground_truth=use_ground_truth)
        return {r.record_id: await heuristic.attribute(r.trajectory, options) for r in corpus}

    first = anyio.run(first_errors)
    table: dict[str, dict[str, dict[str, list[float]]]] = {}
    runs: list[dict[str, Any]] = []
    for record in corpus:
        runs.append(
            {
                "id": record.record_id,
                "framework": framework_of(record),
                "mode": record.gold.mode,
                "gold": [record.gold.agent, record.gold.step],
                "learned": [[agent, step] for _, agent, step in sorted(learned[record.record_id])],
                "baseline": _answer(baseline.get(record.record_id)),
                "first_error": _answer(first[record.record_id]),
            }
        )
        for key in (f"framework:{framework_of(record)}", f"mode:{record.gold.mode or '-'}", "all"):
            cell = table.setdefault(key, {m: {"agent": [], "step": []} for m in METHODS})
            cells = {
                "learned": _mean_over_seeds(learned[record.record_id], record),
                "baseline": _score(baseline.get(record.record_id), record),
                "first_error": _score(first[record.record_id], record),
                "random": _random(record),
            }
            for method, (a_score, s_score) in cells.items():
                cell[method]["agent"].append(a_score)
                cell[method]["step"].append(s_score)
    summary = {
        key: {
            "n": len(cell["learned"]["step"]),
            **{
                method: {
                    metric: sum(values) / len(values) for metric, values in cell[method].items()
                }
                for method in METHODS
            },
        }
        for key, cell in sorted(table.items())
    }
    return {
        "corpus": sorted({r.dataset for r in corpus}),
        "records": len(corpus),
        "also_trained_on": len(also),
        "use_ground_truth": use_ground_truth,
        "seeds": list(seeds),
        "baseline_trained": bool(also),
        "wall_time_s": round(time.perf_counter() - started, 1),
        "lofo_spread": {
            name: subset["accuracy"]["step"] for name, subset in lofo["subsets"].items()
        },
        "table": summary,
        "runs": runs,
    }


def _answer(attribution: Attribution | None) -> list[object] | None:
    if attribution is None:
        return None
    return [attribution.agent, attribution.step, attribution.reason]


def render(summary: dict[str, Any], title: str) -> str:
    """The summary as Markdown tables: per framework, per error mode, overall."""
    lines = [f"# {title}", ""]
    lines.append(
        f"{summary['records']} labelled runs; learned = leave-one-framework-out (trained on the"
        f" other frameworks + {summary['also_trained_on']} other records, seeds"
        f" {summary['seeds']}); baseline = trained on those {summary['also_trained_on']}"
        " records only; random = expected accuracy of a uniform pick;"
        f" ground truth {'given' if summary['use_ground_truth'] else 'withheld'}."
    )
    for prefix, heading in (("framework:", "Held-out framework"), ("mode:", "Error mode")):
        lines += ["", f"| {heading} | n | " + " | ".join(
            f"{m} agent / step %" for m in METHODS) + " |",
            "|---|---:|" + "---:|" * len(METHODS)]  # fmt: skip
        for key, row in summary["table"].items():
            if not key.startswith(prefix) and not (prefix == "mode:" and key == "all"):
                continue
            name = "**all**" if key == "all" else key.split(":", 1)[1]
            cells = " | ".join(
                f"{100 * row[m]['agent']:.1f} / {100 * row[m]['step']:.1f}" for m in METHODS
            )
            lines.append(f"| {name} | {row['n']} | {cells} |")
    return "\n".join(lines) + "\n"


@click.command(name="transfer")
@click.option("--dataset", required=True, help=f"The multi-framework corpus: {SPEC_HELP}.")
@click.option(
    "--train-also", default="who_and_when", show_default=True,
    help="Records every fold also trains on, and the baseline model's only training data"
    " ('none': nothing).",
)  # fmt: skip
@click.option("--cv-seeds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--with-ground-truth/--without-ground-truth", default=True, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the summary JSON on stdout.")
@datasets_dir_option
def transfer_command(
    dataset: str,
    train_also: str,
    cv_seeds: int,
    with_ground_truth: bool,
    out: Path,
    as_json: bool,
    datasets_dir: Path | None,
) -> None:
    """Leave-one-framework-out accuracy per framework and error mode (see the module)."""
    require_training_packages()
    root = resolve_datasets_dir(datasets_dir)
    try:
        corpus = list(load_dataset(dataset, root))
        also = [] if train_also == "none" else list(load_dataset(train_also, root))
    except DatasetError as exc:
        raise click.ClickException(str(exc)) from None
    frameworks = {framework_of(r) for r in corpus}
    if len(frameworks) < 2:
        raise click.BadParameter(
            f"needs runs of two frameworks or more; {dataset!r} has {sorted(frameworks)}",
            param_hint="'--dataset'",
        )
    stderr = Console(stderr=True)
    progress = attribution_progress(stderr)
    with progress:
        task = progress.add_task(
            f"leave-one-framework-out: {len(frameworks)} frameworks × {cv_seeds} seeds",
            total=len(frameworks) * cv_seeds,
        )
        summary = transfer(
            corpus,
            also,
            seeds=tuple(range(cv_seeds)),
            use_ground_truth=with_ground_truth,
            on_fold=lambda _: progress.advance(task),
        )
    summary["dataset"] = dataset
    summary["train_also"] = train_also
    runs = summary.pop("runs")
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with (out / "runs.jsonl").open("w") as lines:
        lines.writelines(json.dumps(run) + "\n" for run in runs)
    report = render(summary, f"Attribution on held-out frameworks: {dataset}")
    (out / "report.md").write_text(report)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(report)
