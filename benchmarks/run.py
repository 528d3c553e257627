"""`faultfinder bench run`: run an attributor over a labelled dataset, score it and write a report.

`run_benchmark` is the reusable core (records in, summary out, files written as it
goes); the click command only resolves options, shows progress and prints.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import anyio
import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from faultfinder.attributors.base import (
    AttributeOptions,
    Attributor,
    UnknownAttributorError,
    available_attributors,
    get_attributor,
)
from faultfinder.attributors.model import Attribution, validate_against
from faultfinder.attributors.scoring import (
    OVERALL,
    RecordScore,
    ScoredRecord,
    aggregate,
    random_expectation,
    score_attribution,
    spread,
)
from faultfinder.benchmarks.datasets import (
    DATASET_SPECS,
    DATASETS_DIR_ENV,
    BenchmarkRecord,
    DatasetError,
    load_dataset,
    resolve_datasets_dir,
)
from faultfinder.benchmarks.report import render_report

__all__ = [
    "BenchmarkSettings",
    "RecordOutcome",
    "attribute_records",
    "random_baseline",
    "run_benchmark",
    "run_command",
]


@dataclass(frozen=True)
class BenchmarkSettings:
    """What a benchmark run does; recorded verbatim in summary.json."""

    dataset: str
    attributor: str
    use_ground_truth: bool = True
    limit: int | None = None
    """At most this many records per subset (None: all)."""
    concurrency: int = 4
    seed: int = 0
    repeats: int = 1
    """Repeat r uses seed `seed + r`."""
    attributor_config: Mapping[str, Any] = field(default_factory=dict)
    datasets_dir: str | None = None

    @property
    def seeds(self) -> list[int]:
        return [self.seed + r for r in range(self.repeats)]

    def as_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "attributor": self.attributor,
            "use_ground_truth": self.use_ground_truth,
            "limit": self.limit,
            "concurrency": self.concurrency,
            "seed": self.seed,
            "repeats": self.repeats,
            "seeds": self.seeds,
            "attributor_config": dict(self.attributor_config),
            "datasets_dir": self.datasets_dir,
        }


@dataclass(frozen=True)
class RecordOutcome:
    """One attribution of one record, with its score and measured latency."""

    record: BenchmarkRecord
    attribution: Attribution
    score: RecordScore
    latency_s: float
    repeat: int = 0
    seed: int | None = None
    invalid: str | None = None
    """Why the attribution does not fit the trajectory (unknown agent, step out of range)."""

    def scored(self) -> ScoredRecord:
        return ScoredRecord(
            subset=self.record.subset,
            score=self.score,
            llm_calls=self.attribution.llm_calls,
            prompt_tokens=self.attribution.prompt_tokens,
            completion_tokens=self.attribution.completion_tokens,
            latency_s=self.latency_s,
        )

    def as_json(self) -> dict[str, Any]:
        gold = self.record.gold
        return {
            "record_id": self.record.record_id,
            "dataset": self.record.dataset,
            "subset": self.record.subset,
            "repeat": self.repeat,
            "seed": self.seed,
            "n_steps": len(self.record.trajectory),
            "gold": {
                "agent": gold.agent,
                "step": gold.step,
                "reason": gold.reason,
                "mode": gold.mode,
            },
            "attribution": self.attribution.model_dump(mode="json"),
            "score": self.score.as_dict(),
            "invalid": self.invalid,
            "llm_calls": self.attribution.llm_calls,
            "prompt_tokens": self.attribution.prompt_tokens,
            "completion_tokens": self.attribution.completion_tokens,
            "latency_s": self.latency_s,
        }


async def _attribute_one(
    attributor: Attributor, record: BenchmarkRecord, options: AttributeOptions
) -> tuple[Attribution, float]:
    trajectory = record.trajectory
    if not options.use_ground_truth and trajectory.ground_truth is not None:
        # Withhold the answer from the method itself, not just by asking it not to look.
        trajectory = trajectory.model_copy(update={"ground_truth": None})
    started = time.perf_counter()
    try:
        attribution = await attributor.attribute(trajectory, options)
    except Exception as exc:  # one bad record must not end the run
        attribution = Attribution.failed(
            getattr(attributor, "name", "unknown"),
            f"attributor raised {type(exc).__name__}: {exc}",
            details={"exception": type(exc).__name__},
        )
    return attribution, time.perf_counter() - started


async def attribute_records(
    records: Sequence[BenchmarkRecord],
    attributor: Attributor,
    options: AttributeOptions,
    *,
    concurrency: int = 4,
    repeat: int = 0,
    on_outcome: Callable[[RecordOutcome], None] | None = None,
) -> list[RecordOutcome]:
    """Attribute and score every record, at most `concurrency` at a time, in input order."""
    limiter = anyio.CapacityLimiter(max(1, concurrency))
    outcomes: list[RecordOutcome | None] = [None] * len(records)

    async def visit(position: int, record: BenchmarkRecord) -> None:
        async with limiter:
            attribution, latency = await _attribute_one(attributor, record, options)
        outcome = RecordOutcome(
            record=record,
            attribution=attribution,
            score=score_attribution(attribution, record.gold.agent, record.gold.step),
            latency_s=latency,
            repeat=repeat,
            seed=options.seed,
            invalid=validate_against(attribution, record.trajectory),
        )
        outcomes[position] = outcome
        if on_outcome is not None:
            on_outcome(outcome)

    async with anyio.create_task_group() as group:
        for position, record in enumerate(records):
            group.start_soon(visit, position, record)
    return [outcome for outcome in outcomes if outcome is not None]


def random_baseline(records: Sequence[BenchmarkRecord]) -> dict[str, dict[str, float]]:
    """Expected accuracy of the uniform random baseline per subset and overall (fractions)."""
    groups: dict[str, list[BenchmarkRecord]] = {}
    for record in records:
        groups.setdefault(record.subset, []).append(record)
    groups = {name: groups[name] for name in sorted(groups)}
    groups[OVERALL] = list(records)
    result: dict[str, dict[str, float]] = {}
    for name, members in groups.items():
        expectations = [
            random_expectation(r.trajectory.roster, len(r.trajectory), r.gold.agent, r.gold.step)
            for r in members
        ]
        n = max(1, len(expectations))
        result[name] = {
            "agent": sum(e.agent for e in expectations) / n,
            "step": sum(e.step for e in expectations) / n,
        }
    return result


def _summarise(
    settings: BenchmarkSettings,
    repeats: list[list[RecordOutcome]],
    records: Sequence[BenchmarkRecord],
    wall_times: list[float],
    started_at: datetime,
    out_dir: Path | None,
) -> dict[str, Any]:
    per_repeat = [aggregate([o.scored() for o in outcomes]) for outcomes in repeats]
    expected = random_baseline(records)
    subsets: dict[str, Any] = {}
    for name in per_repeat[0] if per_repeat else {}:
        runs = [scores[name] for scores in per_repeat]
        accuracy = {}
        for metric in runs[0].accuracy:
            values = [run.accuracy[metric] for run in runs]
            accuracy[metric] = {**spread(values), "values": values}
        failed = [float(run.failed) for run in runs]
        subsets[name] = {
            "n": runs[0].n,
            "failed": {**spread(failed), "values": failed},
            "accuracy": accuracy,
            "cost": {
                "mean_llm_calls": sum(r.mean_llm_calls for r in runs) / len(runs),
                "mean_prompt_tokens": sum(r.mean_prompt_tokens for r in runs) / len(runs),
                "mean_completion_tokens": sum(r.mean_completion_tokens for r in runs) / len(runs),
                "mean_latency_s": sum(r.mean_latency_s for r in runs) / len(runs),
            },
            "random_expected": expected.get(name, {"agent": 0.0, "step": 0.0}),
        }
    return {
        "dataset": settings.dataset,
        "attributor": settings.attributor,
        "settings": settings.as_dict(),
        "started_at": started_at.isoformat(),
        "wall_time_s": sum(wall_times),
        "repeat_wall_time_s": wall_times,
        "out_dir": str(out_dir) if out_dir is not None else None,
        "subsets": subsets,
    }


async def run_benchmark(
    records: Sequence[BenchmarkRecord],
    attributor: Attributor,
    settings: BenchmarkSettings,
    *,
    out_dir: Path | None = None,
    on_outcome: Callable[[RecordOutcome], None] | None = None,
) -> dict[str, Any]:
    """Run `settings.repeats` passes over `records`, score them and return the summary.

    With `out_dir`, results.jsonl grows one line per attributed record as the run
    proceeds, and summary.json and report.md are written at the end.
    """
    started_at = datetime.now(UTC)
    results_file: IO[str] | None = None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        results_file = (out_dir / "results.jsonl").open("w", encoding="utf-8")

    def record_outcome(outcome: RecordOutcome) -> None:
        if results_file is not None:
            results_file.write(json.dumps(outcome.as_json(), ensure_ascii=False) + "\n")
            results_file.flush()
        if on_outcome is not None:
            on_outcome(outcome)

    repeats: list[list[RecordOutcome]] = []
    wall_times: list[float] = []
    try:
        for repeat, seed in enumerate(settings.seeds):
            options = AttributeOptions(
                use_ground_truth=settings.use_ground_truth,
                seed=seed,
                extra=dict(settings.attributor_config),
            )
            began = time.perf_counter()
            outcomes = await attribute_records(
                records,
                attributor,
                options,
                concurrency=settings.concurrency,
                repeat=repeat,
                on_outcome=record_outcome,
            )
            wall_times.append(time.perf_counter() - began)
            repeats.append(outcomes)
    finally:
        if results_file is not None:
            results_file.close()

    summary = _summarise(settings, repeats, records, wall_times, started_at, out_dir)
    if out_dir is not None:
        (out_dir / "summary.json").write_text(
            json.dumps(summary, indent=2) + "\n", encoding="utf-8"
        )
        (out_dir / "report.md").write_text(render_report(summary), encoding="utf-8")
    return summary


# --- command line ------------------------------------------------------------------


def _select(records: Sequence[BenchmarkRecord], limit: int | None) -> list[BenchmarkRecord]:
    if limit is None:
        return list(records)
    taken: dict[str, int] = {}
    selected = []
    for record in records:
        if taken.get(record.subset, 0) < limit:
            taken[record.subset] = taken.get(record.subset, 0) + 1
            selected.append(record)
    return selected


def _default_out_dir(dataset: str, attributor: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = Path("bench-out") / f"{dataset.replace(':', '-')}-{attributor}-{stamp}"
    candidate, suffix = base, 1
    while candidate.exists():
        suffix += 1
        candidate = base.with_name(f"{base.name}-{suffix}")
    return candidate


def _summary_table(summary: Mapping[str, Any]) -> Table:
    repeats = int(summary["settings"]["repeats"])
    table = Table(title=f"{summary['attributor']} on {summary['dataset']}")
    for column in (
        "subset", "n", "agent %", "step %", "±1 %", "±3 %", "±5 %",
        "official agent %", "official step %", "random expected agent/step %",
    ):  # fmt: skip
        table.add_column(column, justify="left" if column == "subset" else "right")

    def pct(metric: Mapping[str, float]) -> str:
        text = f"{100 * metric['mean']:.1f}"
        return text + f" ±{100 * metric['std']:.1f}" if repeats > 1 else text

    for name, subset in summary["subsets"].items():
        accuracy = subset["accuracy"]
        expected = subset["random_expected"]
        table.add_row(
            name,
            str(subset["n"]),
            *(pct(accuracy[key]) for key in ("agent", "step", "step_pm1", "step_pm3", "step_pm5")),
            pct(accuracy["official_agent"]),
            pct(accuracy["official_step"]),
            f"{100 * expected['agent']:.1f} / {100 * expected['step']:.1f}",
        )
    return table


def _check_attributor(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value not in available_attributors():
        raise click.BadParameter(
            f"unknown attributor {value!r}; available: {', '.join(available_attributors())}",
            ctx=ctx,
            param=param,
        )
    return value


@click.command(name="run")
@click.option(
    "--dataset",
    required=True,
    help="who_and_when[:algorithm-generated|:hand-crafted] or who_and_when_pro.",
)
@click.option(
    "--attributor",
    required=True,
    callback=_check_attributor,
    help="Registered attributor name, e.g. random, first_error.",
)
@click.option(
    "--with-ground-truth/--without-ground-truth",
    default=True,
    show_default=True,
    help="Whether the method may see the task's correct answer.",
)
@click.option("--limit", type=click.IntRange(min=1), help="At most N records per subset.")
@click.option(
    "--concurrency", type=click.IntRange(min=1), default=4, show_default=True,
    help="Records attributed at the same time.",
)  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the first repeat.")
@click.option(
    "--repeats", type=click.IntRange(min=1), default=1, show_default=True,
    help="Passes over the data with seeds S..S+K-1; the summary gives mean and spread.",
)  # fmt: skip
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Output directory (default bench-out/<dataset>-<attributor>-<timestamp>/).",
)
@click.option("--json", "as_json", is_flag=True, help="Print only the summary JSON on stdout.")
@click.option(
    "--datasets-dir",
    envvar=DATASETS_DIR_ENV,
    type=click.Path(file_okay=False, path_type=Path),
    help=f"Root of the datasets (${DATASETS_DIR_ENV}; default ../shared/datasets).",
)
def run_command(
    dataset: str,
    attributor: str,
    with_ground_truth: bool,
    limit: int | None,
    concurrency: int,
    seed: int,
    repeats: int,
    out: Path | None,
    as_json: bool,
    datasets_dir: Path | None,
) -> None:
    """Score an attributor on a labelled dataset (accuracy, ±k, official-script, cost)."""
    if dataset.strip().lower() not in DATASET_SPECS:
        raise click.BadParameter(
            f"unknown dataset {dataset!r}; valid: {', '.join(DATASET_SPECS)}",
            param_hint="'--dataset'",
        )
    root = resolve_datasets_dir(datasets_dir)
    try:
        records = _select(list(load_dataset(dataset, root)), limit)
    except DatasetError as exc:
        # The message names the folder or file and field at fault.
        raise click.ClickException(str(exc)) from None
    if not records:
        raise click.BadParameter(
            f"{dataset!r} has no records under {root}", param_hint="'--dataset'"
        )
    try:
        method = get_attributor(attributor)
    except UnknownAttributorError as exc:
        raise click.BadParameter(str(exc), param_hint="'--attributor'") from None

    settings = BenchmarkSettings(
        dataset=dataset,
        attributor=attributor,
        use_ground_truth=with_ground_truth,
        limit=limit,
        concurrency=concurrency,
        seed=seed,
        repeats=repeats,
        datasets_dir=str(root),
    )
    out_dir = out if out is not None else _default_out_dir(dataset, attributor)
    stderr = Console(stderr=True)
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=stderr,
        transient=False,
    )
    with progress:
        task = progress.add_task(
            f"{attributor} on {dataset}", total=len(records) * settings.repeats
        )
        summary = anyio.run(
            lambda: run_benchmark(
                records,
                method,
                settings,
                out_dir=out_dir,
                on_outcome=lambda _: progress.advance(task),
            )
        )

    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    Console().print(_summary_table(summary))
    click.echo(
        "random expected = analytical accuracy of a uniform random agent/step on these records"
    )
    click.echo(
        f"wrote {out_dir / 'results.jsonl'}, {out_dir / 'summary.json'}, {out_dir / 'report.md'}"
    )
