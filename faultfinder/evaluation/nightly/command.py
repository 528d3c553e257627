"""The click commands `faultfinder bench nightly` (run the suite, keep its history, gate on
regressions) and `faultfinder bench history` (list, export as JSON Lines, accept)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import anyio
import click
from rich.console import Console

from faultfinder import __version__
from faultfinder.datasets import DATASETS_DIR_ENV, resolve_datasets_dir
from faultfinder.evaluation.nightly.gate import describe
from faultfinder.evaluation.nightly.report import write_nightly_report
from faultfinder.evaluation.nightly.runner import NightlyOptions, NightlyResult, run_nightly
from faultfinder.evaluation.nightly.suite import (
    DEFAULT_SUITE,
    IN_SAMPLE,
    SuiteError,
    in_sample,
    load_suite,
)
from faultfinder.evaluation.run.models import terminate_cleanly
from faultfinder.server.db.engine import DatabaseURLError, create_engine, database_url
from faultfinder.server.db.migrate import upgrade
from faultfinder.server.store import BenchEntry, BenchHistory, BenchRun, UnknownBenchEntryError

__all__ = ["detect_code_version", "history_group", "nightly_command"]

DEFAULT_DATABASE = "sqlite+aiosqlite:///faultfinder.db"
"""The sidecar's own default (FAULTFINDER_DATABASE_URL), so its dashboard shows the trend."""
REGRESSION_EXIT = 1
"""Exit status of a night on which some entry was worse than its baseline beyond noise."""
TREND_DAYS = 90
"""Days of history the run's report.html draws."""

T = TypeVar("T")


def detect_code_version() -> str:
    """faultfinder's version, with the git commit (and `.dirty`) when run from a checkout."""
    root = Path(__file__).resolve().parents[3]
    if not (root / ".git").exists():
        return __version__
    # Optional locks off: a status check must not write the index another git holds.
    environ = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
            env=environ,
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+g{commit}" + (".dirty" if dirty else "")


def _import_plugins(plugins: str | None) -> None:
    for module in filter(None, (part.strip() for part in (plugins or "").split(","))):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise click.ClickException(f"--plugins: cannot import {module!r}: {exc}") from None


def _shown_url(url: str) -> str:
    try:
        return database_url(url).render_as_string(hide_password=True)
    except DatabaseURLError as exc:
        raise click.BadParameter(str(exc), param_hint="'--database'") from None


def _with_history(database: str, work: Callable[[BenchHistory], Awaitable[T]]) -> T:
    async def main() -> T:
        engine = create_engine(database)
        try:
            return await work(BenchHistory(engine))
        finally:
            await engine.dispose()

    return anyio.run(main)


def _migrate(database: str) -> None:
    _shown_url(database)
    try:
        upgrade(database)
    except Exception as exc:  # the database cannot be reached or written
        raise click.ClickException(
            f"cannot prepare the history database {_shown_url(database)}: {type(exc).__name__}:"
            f" {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None


_DATABASE = click.option(
    "--database",
    "database",
    envvar="FAULTFINDER_DATABASE_URL",
    default=DEFAULT_DATABASE,
    show_default=True,
    metavar="URL",
    help="The history's database: the sidecar's (FAULTFINDER_DATABASE_URL), so its dashboard"
    " and /metrics show the scores. Migrated first.",
)


@click.command("nightly")
@click.option(
    "--suite",
    "suite_path",
    # Read (and its absence reported) by load_suite, so that a deployment's command line
    # naming a path inside its container parses anywhere.
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_SUITE,
    show_default="the repository's faultfinder/evaluation/nightly/default.toml",
    help="The suite file (TOML: datasets × attributors × settings; docs/nightly.md).",
)
@_DATABASE
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-out") / "nightly",
    show_default=True,
    help="Working folder: each entry's resumable results and the run's report.html.",
)
@click.option(
    "--run-id",
    help="Name this suite run; a run of that name is continued. Default: continue this"
    " suite's unfinished run of the last 24 h made with this code, else start one.",
)
@click.option("--new", is_flag=True, help="Start a new run even if an unfinished one remains.")
@click.option(
    "--code-version",
    envvar="FAULTFINDER_CODE_VERSION",
    help="What the history records as the code (e.g. a CI commit); default: faultfinder's"
    " version and the checkout's git commit.",
)
@click.option(
    "--datasets-dir",
    envvar=DATASETS_DIR_ENV,
    type=click.Path(file_okay=False, path_type=Path),
    help=f"Root of the named datasets (${DATASETS_DIR_ENV}; default ../shared/datasets).",
)
@click.option(
    "--plugins",
    envvar="FAULTFINDER_PLUGINS",
    help="Comma-separated modules that register attributors the suite names"
    " (FAULTFINDER_PLUGINS, as the sidecar reads it).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the run's entries as JSON on stdout.")
@click.pass_context
def nightly_command(
    ctx: click.Context,
    suite_path: Path,
    database: str,
    out: Path,
    run_id: str | None,
    new: bool,
    code_version: str | None,
    datasets_dir: Path | None,
    plugins: str | None,
    as_json: bool,
) -> None:
    """Run the nightly benchmark suite, keep its history and gate on regressions.

    Scores each (dataset, attributor, settings) entry of the suite, stores it in the
    history (accuracy with 95 % intervals, every record's correctness, tokens, time) and
    compares it with its last accepted entry on the records both scored. Exits 1 when an
    entry is worse beyond noise (one-sided exact McNemar per metric), naming it and the
    records that changed. An interrupted run continues where it stopped: run it again.
    """
    if run_id is not None and new:
        raise click.UsageError("give either --run-id or --new")
    _import_plugins(plugins)
    try:
        suite = load_suite(suite_path)
    except SuiteError as exc:
        raise click.ClickException(str(exc)) from None
    _migrate(database)
    options = NightlyOptions(
        suite_dir=suite_path.resolve().parent,
        database_url=database,
        datasets_dir=resolve_datasets_dir(datasets_dir),
        out=out,
        code_version=code_version or detect_code_version(),
        environ=dict(os.environ),
        run_id=run_id,
        new=new,
    )
    console = Console(stderr=True)
    started: list[BenchRun] = []

    async def night(history: BenchHistory) -> tuple[NightlyResult, list[BenchEntry]]:
        result = await run_nightly(suite, history, options, console=console, on_run=started.append)
        since = time.time_ns() - TREND_DAYS * 86400 * 10**9
        keys = [entry.entry for entry in result.entries]
        trend = await history.history(since_ns=since, entries=keys, limit=20_000)
        return result, trend

    try:
        with terminate_cleanly():
            result, trend = _with_history(database, night)
    except KeyboardInterrupt:
        where = f" nightly run {started[0].id}" if started else ""
        click.echo(f"\ninterrupted: run the same command again to continue{where}", err=True)
        sys.exit(130)
    report = write_nightly_report(
        out / result.run.id, result.run, result.entries, result.baselines, trend
    )
    if as_json:
        click.echo(json.dumps(_as_json(result, report), indent=2))
    else:
        _print_result(result, suite.name, _shown_url(database), report)
    if result.regressions:
        ctx.exit(REGRESSION_EXIT)


def _as_json(result: NightlyResult, report: Path) -> dict[str, Any]:
    entries = []
    for entry in result.entries:
        data = entry.as_json()
        data.pop("records")
        data["in_sample"] = in_sample(entry.definition)
        entries.append(data)
    return {
        "run": {
            "id": result.run.id,
            "suite": result.run.suite,
            "code_version": result.run.code_version,
            "plan": result.run.plan,
        },
        "entries": entries,
        "regressions": [entry.entry for entry in result.regressions],
        "report": str(report),
        "wall_time_s": result.wall_time_s,
    }


def _figure(entry: BenchEntry, metric: str) -> str:
    figure = entry.figures["overall"][metric]
    return f"{100 * figure['value']:5.1f} [{100 * figure['lo']:4.1f}–{100 * figure['hi']:5.1f}]"


def _table(entries: Sequence[BenchEntry]) -> list[str]:
    header = ("entry", "records", "agent % [95 %]", "step % [95 %]", "tokens", "time", "gate")
    rows = [
        (
            f"{entry.entry} ({IN_SAMPLE})" if in_sample(entry.definition) else entry.entry,
            str(entry.n_records),
            _figure(entry, "agent"),
            _figure(entry, "step"),
            str(entry.prompt_tokens + entry.completion_tokens),
            f"{entry.wall_time_s:.1f} s",
            entry.verdict.upper() if entry.regression else entry.verdict,
        )
        for entry in entries
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    return [
        "  ".join(
            cell.ljust(width) if i in (0, 6) else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in (header, *rows)
    ]


def _print_result(result: NightlyResult, suite: str, database: str, report: Path) -> None:
    run = result.run
    click.echo(
        f"nightly run {run.id} · suite {suite} · code {run.code_version} · history in {database}"
    )
    for line in _table(result.entries):
        click.echo(line)
    if any(in_sample(entry.definition) for entry in result.entries):
        click.echo(
            f"{IN_SAMPLE}: the attributor was trained on that dataset; its figures show change"
            " from night to night, not held-out accuracy"
        )
    for item in run.plan:
        if item.get("skipped"):
            click.echo(f"skipped {item['entry']}: {item['skipped']}")
    for entry in result.entries:
        for line in describe(entry, result.baselines.get(entry.baseline_id or -1)):
            click.echo(line)
    compared = sum(entry.baseline_id is not None for entry in result.entries)
    click.echo(
        f"scored {result.scored_now} entries this session in {result.wall_time_s:.1f} s;"
        f" report {report}"
    )
    if result.regressions:
        names = ", ".join(f"{e.entry} (attributor {e.method})" for e in result.regressions)
        click.echo(
            f"gate: FAILED, {len(result.regressions)} entries worse than their baseline beyond"
            f" noise: {names}"
        )
    else:
        click.echo(
            f"gate: passed, no entry worse than its baseline beyond noise ({compared} compared,"
            f" {len(result.entries) - compared} without a baseline yet)"
        )


# --- history ----------------------------------------------------------------------------


@click.group("history")
def history_group() -> None:
    """The nightly benchmark's history: list it, export it as JSON Lines, accept an entry."""


@history_group.command("list")
@_DATABASE
@click.option("--entry", "entries", multiple=True, help="Only this dataset/attributor/settings.")
@click.option("--limit", type=click.IntRange(min=1), default=30, show_default=True)
def history_list(database: str, entries: tuple[str, ...], limit: int) -> None:
    """The newest history entries: accuracy, the gate's verdict and its baseline."""
    _migrate(database)
    found = _with_history(database, lambda history: history.history(entries=entries, limit=limit))
    if not found:
        click.echo("no benchmark history yet (faultfinder bench nightly writes it)", err=True)
        return
    click.echo("id     when (UTC)        run / code")
    for entry in found:
        when = datetime.fromtimestamp(entry.created_at / 1e9, UTC)
        baseline = f" vs #{entry.baseline_id}" if entry.baseline_id is not None else ""
        accepted = "" if entry.accepted else " (not accepted)"
        click.echo(
            f"#{entry.id:<5} {when:%Y-%m-%d %H:%M}  {entry.run_id} / {entry.code_version}\n"
            f"       {entry.entry}: agent {_figure(entry, 'agent')} step"
            f" {_figure(entry, 'step')} on {entry.n_records} records,"
            f" {entry.verdict}{baseline}{accepted}"
        )


@history_group.command("export")
@_DATABASE
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The JSON Lines file to write (default: standard output).",
)
@click.option("--entry", "entries", multiple=True, help="Only this dataset/attributor/settings.")
@click.option(
    "--since",
    type=click.DateTime(),
    help="Only entries stored since this date (UTC).",
)
@click.option(
    "--records/--no-records",
    default=True,
    show_default=True,
    help="Include every record's correctness.",
)
def history_export(
    database: str,
    out: Path | None,
    entries: tuple[str, ...],
    since: datetime | None,
    records: bool,
) -> None:
    """Write the history as JSON Lines, one entry per line, oldest first."""
    _migrate(database)
    since_ns = int(since.replace(tzinfo=since.tzinfo or UTC).timestamp() * 1e9) if since else None
    found = _with_history(
        database,
        lambda history: history.history(since_ns=since_ns, entries=entries, with_records=records),
    )
    lines = []
    for entry in found:
        data = entry.as_json()
        if not records:
            data.pop("records")
        lines.append(json.dumps(data, ensure_ascii=False))
    text = "".join(line + "\n" for line in lines)
    if out is None:
        click.echo(text, nl=False)
    else:
        partial = out.with_name(out.name + ".partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(out)
    click.echo(f"wrote {len(lines)} history entries" + (f" to {out}" if out else ""), err=True)


@history_group.command("accept")
@_DATABASE
@click.argument("entry_id", type=int)
def history_accept(database: str, entry_id: int) -> None:
    """Accept entry ENTRY_ID as its entry's baseline: a change the gate found worse, but
    intended. Later nights compare with it."""
    _migrate(database)
    try:
        entry = _with_history(database, lambda history: history.accept(entry_id))
    except UnknownBenchEntryError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"#{entry.id} {entry.entry} (run {entry.run_id}) is now the baseline later nights"
        " compare with"
    )
