"""`faultfinder train`: the labelled records to train on, and the model file it writes.

`faultfinder train --dataset who_and_when --out model.json` reads a dataset's records
(and with `--from-database` the runs people labelled in a sidecar), fits a `StepModel`
with `faultfinder.training.tune_and_fit` (with conformal calibration and the
auditor's prefix-only model) and writes the JSON artifact that the pure-Python
`learned` attributor loads. numpy, scipy and lightgbm are needed here only.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console

from faultfinder.datasets import (
    SPEC_HELP,
    BenchmarkRecord,
    DatasetError,
    load_dataset,
    resolve_datasets_dir,
)
from faultfinder.datasets.options import datasets_dir_option, from_database_option
from faultfinder.training import (
    FeatureCache,
    TrainingOptions,
    tune_and_fit,
)

if TYPE_CHECKING:
    from faultfinder.datasets.labelled import LabelledRuns

NO_DATASET = "none"
"""`faultfinder train --dataset none --from-database URL`: the database's labelled runs alone."""

MIN_TRAINING_RECORDS = 6

TRAINING_EXTRA_HINT = "training needs numpy, scipy and lightgbm (pip install 'faultfinder[train]')"

__all__ = [
    "MIN_TRAINING_RECORDS",
    "NO_DATASET",
    "labelled_training_records",
    "require_training_packages",
    "train_command",
]


def require_training_packages() -> None:
    """Fail with a clear message when the training extra is not installed."""
    import importlib.util

    missing = [
        name for name in ("numpy", "scipy", "lightgbm") if importlib.util.find_spec(name) is None
    ]
    if missing:
        raise click.ClickException(f"{TRAINING_EXTRA_HINT}; missing: {', '.join(missing)}")


@click.command(name="train")
@click.option(
    "--dataset",
    default="who_and_when",
    show_default=True,
    help=f"Labelled records to train on: {SPEC_HELP}.",
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the model JSON.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for folds and trees.")
@click.option(
    "--with-ground-truth/--without-ground-truth",
    default=True,
    show_default=True,
    help="Whether the model's features may use the task's correct answer.",
)
@datasets_dir_option
@from_database_option
def train_command(
    dataset: str,
    out: Path,
    seed: int,
    with_ground_truth: bool,
    datasets_dir: Path | None,
    database_url: str | None,
) -> None:
    """Train the `learned` attributor's step model and write it as JSON.

    Serve it with FAULTFINDER_LEARNED_MODEL=<file> (the learned attributor, the online
    auditor and the LLM pre-filter then use it instead of the packaged model).
    """
    require_training_packages()
    records, source, skipped = labelled_training_records(dataset, datasets_dir, database_url)
    if len(records) < MIN_TRAINING_RECORDS:
        raise click.ClickException(
            f"{source} has {len(records)} labelled records; training needs at least "
            f"{MIN_TRAINING_RECORDS}"
        )
    stderr = Console(stderr=True)
    with stderr.status(f"training on {len(records)} records of {source}") as status:
        model = tune_and_fit(
            records,
            cache=FeatureCache(),
            options=TrainingOptions(seed=seed, use_ground_truth=with_ground_truth),
            on_step=lambda label: status.update(f"training on {source}: {label}"),
        )
    model = replace(
        model,
        training={
            **model.training,
            "dataset": source,
            "trained_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out)
    chosen = model.training.get("configs", [])
    click.echo(
        json.dumps(
            {
                "out": str(out),
                "records": len(records),
                "dataset": source,
                "skipped": skipped,
                "configs": chosen,
                "agent_rule": model.agent_rule,
            }
        )
    )


def labelled_training_records(
    dataset: str, datasets_dir: Path | None, database_url: str | None
) -> tuple[list[BenchmarkRecord], str, list[str]]:
    """The records of `--dataset` (or none) plus the labelled runs of `--from-database`:
    (records, a description of where they came from, the database labels skipped)."""
    spec = dataset.strip().lower()
    if spec == NO_DATASET and database_url is None:
        raise click.BadParameter(
            f"--dataset {NO_DATASET} leaves no records without --from-database",
            param_hint="'--dataset'",
        )
    records: list[BenchmarkRecord] = []
    sources: list[str] = []
    if spec != NO_DATASET:
        root = resolve_datasets_dir(datasets_dir)
        try:
            records.extend(load_dataset(dataset, root))
        except DatasetError as exc:
            raise click.ClickException(str(exc)) from None
        sources.append(dataset)
    skipped: list[str] = []
    if database_url is not None:
        labelled = _labelled_runs(database_url)
        records.extend(labelled.records)
        skipped = labelled.skipped
        sources.append(f"database ({len(labelled.records)} labelled runs)")
    return records, " + ".join(sources), skipped


def _labelled_runs(database_url: str) -> LabelledRuns:
    """The database's labelled runs, with progress on stderr; a clear error if unreadable."""
    import anyio

    from faultfinder.datasets.labelled import LabelledRunsError, labelled_records
    from faultfinder.server.db.engine import DatabaseURLError
    from faultfinder.server.db.engine import database_url as database_url_of
    from faultfinder.server.progress import Progress

    try:
        url = database_url_of(database_url)
    except DatabaseURLError as exc:
        raise click.BadParameter(str(exc), param_hint="'--from-database'") from None
    if url.get_backend_name() == "sqlite" and not Path(url.database or "").is_file():
        # Connecting would create an empty file: reading must not write.
        raise click.BadParameter(
            f"no SQLite database file at {url.database!r}", param_hint="'--from-database'"
        )
    with Progress(console=Console(stderr=True)) as progress:
        task = progress.add_task("reading labelled runs", total=None)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        async def read() -> LabelledRuns:
            return await labelled_records(database_url, on_run=advance)

        try:
            return anyio.run(read)
        except LabelledRunsError as exc:
            raise click.ClickException(str(exc)) from None
