"""`faultfinder dataset convert`, `export`, `check` and `stats` (the group is
`faultfinder.cli.dataset`): labelled runs in the generic format (docs/datasets.md).

faultfinder dataset convert who_and_when --out who_and_when.jsonl
faultfinder dataset export --database sqlite+aiosqlite:///faultfinder.db --out mine.jsonl
faultfinder dataset check corpus.jsonl
faultfinder dataset stats who_and_when data/corpus/injected
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


_STATS_COLUMNS = (
    ("runs", "runs"),
    ("steps (q1/med/q3)", "steps_quartiles"),
    ("agents (med)", "agents_median"),
    ("≥15 steps %", "pct_15_steps"),
    ("≥3 agents %", "pct_3_agents"),
    ("one agent turn %", "pct_one_agent_turn"),
    ("label position (q1/med/q3)", "label_position_quartiles"),
    ("label in first 3 turns %", "pct_label_in_first_3_turns"),
    ("error before label %", "pct_error_before_label"),
    ("recovered error before %", "pct_recovered_error_before_label"),
    ("apology before %", "pct_apology_before_label"),
    ("unsupported figure before %", "pct_unsupported_figure_before_label"),
    ("any of these before %", "pct_any_distractor_before_label"),
    ("modes", "modes"),
)


@click.command("stats")
@click.argument("specs", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
@datasets_dir_option
def stats(specs: tuple[str, ...], as_json: bool, datasets_dir: Path | None) -> None:
    """How much each SPEC looks like real failures (faultfinder/datasets/realism.py): run
    shape, where labels sit, and what comes before them. Prints a Markdown table, a row per
    subset and one per SPEC, to set beside a set people labelled."""
    import json

    from faultfinder.datasets.realism import set_stats

    rows = []
    try:
        for spec in specs:
            records = load_dataset(spec, resolve_datasets_dir(datasets_dir))
            rows += [found.as_dict() for found in set_stats(records, spec)]
    except DatasetError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return

    def shown(value: object) -> str:
        if isinstance(value, list):
            return "/".join(f"{float(v):g}" for v in value)
        return f"{float(value):g}" if isinstance(value, int | float) else str(value)

    click.echo("| set | " + " | ".join(title for title, _ in _STATS_COLUMNS) + " |")
    click.echo("|---|" + "---:|" * len(_STATS_COLUMNS))
    for row in rows:
        cells = [shown(row[key]) for _, key in _STATS_COLUMNS]
        click.echo(f"| {row['set']} | " + " | ".join(cells) + " |")
