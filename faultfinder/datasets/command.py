"""`faultfinder dataset convert`, `export` and `check` (the group is
`faultfinder.cli.dataset`): labelled runs in the generic format (docs/datasets.md).

faultfinder dataset convert who_and_when --out who_and_when.jsonl
faultfinder dataset export --database sqlite+aiosqlite:///faultfinder.db --out mine.jsonl
faultfinder dataset check corpus.jsonl
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import anyio
import click
from rich.console import Console

from faultfinder.datasets import (
    SPEC_HELP,
    BenchmarkRecord,
    DatasetError,
    count_records,
    load_dataset,
    resolve_datasets_dir,
    write_records,
)
from faultfinder.datasets.options import datasets_dir_option
from faultfinder.server.progress import Progress

__all__ = ["check", "convert", "export"]


def _write(records: Iterable[BenchmarkRecord], out: Path | None, total: int | None) -> int:
    """Write records to `out` (or stdout), with progress on stderr; the count written.

    The file is written beside its final name and moved into place at the end, so an
    interrupted run never leaves a truncated dataset behind.
    """
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("writing records", total=total)

        def counted() -> Iterable[BenchmarkRecord]:
            for record in records:
                yield record
                progress.advance(task)

        if out is None:
            return write_records(counted(), sys.stdout)
        partial = out.with_name(out.name + ".partial")
        out.parent.mkdir(parents=True, exist_ok=True)
        with partial.open("w", encoding="utf-8") as handle:
            written = write_records(counted(), handle)
        partial.replace(out)
        return written


_OUT = click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The JSON Lines file to write (default: standard output).",
)


@click.command(
    "convert", help=f"Convert SPEC's labelled records to the generic format. SPEC: {SPEC_HELP}."
)
@click.argument("spec")
@_OUT
@datasets_dir_option
def convert(spec: str, out: Path | None, datasets_dir: Path | None) -> None:
    root = resolve_datasets_dir(datasets_dir)
    try:
        total = count_records(spec, root)
        written = _write(load_dataset(spec, root), out, total)
    except DatasetError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {written} records" + (f" to {out}" if out else ""), err=True)


@click.command("export")
@click.option(
    "--database",
    "database_url",
    required=True,
    metavar="URL",
    help="The sidecar's database (SQLAlchemy async URL, e.g. sqlite+aiosqlite:///faultfinder.db).",
)
@_OUT
def export(database_url: str, out: Path | None) -> None:
    """Export a sidecar database's labelled runs (people's labels and injected failures):
    each run's trajectory as the attributors see it, with its newest label."""
    from faultfinder.datasets.labelled import LabelledRunsError, labelled_records

    try:
        labelled = anyio.run(lambda: labelled_records(database_url))
    except LabelledRunsError as exc:
        raise click.ClickException(str(exc)) from None
    for line in labelled.skipped:
        click.echo(f"skipped {line}", err=True)
    written = _write(labelled.records, out, len(labelled.records))
    click.echo(f"wrote {written} labelled runs" + (f" to {out}" if out else ""), err=True)


@click.command("check")
@click.argument("spec")
@datasets_dir_option
def check(spec: str, datasets_dir: Path | None) -> None:
    """Read every record of SPEC and print what it holds: records per subset, label
    sources, error modes, steps by role. Exits non-zero on the first invalid record."""
    from faultfinder.datasets import step_role

    subsets: Counter[str] = Counter()
    sources: Counter[str] = Counter()
    modes: Counter[str] = Counter()
    roles: Counter[str] = Counter()
    blamed_roles: Counter[str] = Counter()
    try:
        for record in load_dataset(spec, resolve_datasets_dir(datasets_dir)):
            subsets[record.subset] += 1
            sources[record.gold.source] += 1
            modes[record.gold.mode or "-"] += 1
            steps = record.trajectory.steps
            roles.update(step_role(step) for step in steps)
            blamed_roles[step_role(steps[record.gold.step])] += 1
    except DatasetError as exc:
        raise click.ClickException(str(exc)) from None
    total = sum(subsets.values())
    click.echo(f"{total} records")
    for title, counts in (
        ("subsets", subsets),
        ("label sources", sources),
        ("error modes", modes),
        ("steps by role", roles),
        ("labelled steps by role", blamed_roles),
    ):
        click.echo(f"{title}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
