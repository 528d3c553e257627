"""`faultfinder bench chaos`: the command that runs the kill, overload and hostile drills
(and the fuzz suite) on one or more databases and prints their figures."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

from faultfinder.drills.chaos.hostile import finding_lines, parse_items, run_hostile
from faultfinder.drills.chaos.hostile_context import FULL, QUICK, Finding
from faultfinder.drills.chaos.kills import KillDrill, KillReport, run_kill_chaos
from faultfinder.drills.chaos.overload import OverloadDrill, OverloadReport, run_overload
from faultfinder.drills.chaos.stored_state import redacted, stored_span_count
from faultfinder.evaluation.sidecar import SidecarProcess
from faultfinder.server.progress import Progress

__all__ = ["FUZZ_SUITE", "chaos_command", "parse_pin", "run_fuzz_suite"]


def _report_lines(report: KillReport | OverloadReport) -> Iterator[str]:
    for name, value in dataclasses.asdict(report).items():
        if isinstance(value, float):
            value = round(value, 2)
        elif isinstance(value, list) and value and isinstance(value[0], float):
            value = [round(v, 2) for v in value]
        yield f"{name:32} {value}"
    yield f"{'ok':32} {report.ok}"


@click.command(name="chaos")
@click.option(
    "--database-url",
    "database_urls",
    multiple=True,
    help="An empty database to run on (repeat for several; default: a new SQLite file).",
)
@click.option("--kills", type=click.IntRange(min=0), default=0, help="SIGKILLs per database.")
@click.option(
    "--duration",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="Seconds of ingest per database (with --kills).",
)
@click.option(
    "--overload",
    "overload_factor",
    type=click.FloatRange(min=1.0),
    default=None,
    help="Drive ingest at this multiple of the measured capacity (e.g. 2).",
)
@click.option(
    "--overload-duration",
    type=click.FloatRange(min=1),
    default=30.0,
    show_default=True,
    help="Seconds of overload.",
)
@click.option(
    "--overload-connections",
    type=click.IntRange(min=1),
    default=OverloadDrill.max_in_flight,
    show_default=True,
    help="Connections the overload's senders may hold open: the sidecar sees at most this "
    "many requests at once, so its queue fills (and it sheds load with 503) only when they "
    "carry more spans than the queue holds.",
)
@click.option(
    "--pin",
    default=None,
    metavar="SERVER:LOAD",
    help="With --overload: run the sidecar on the cores SERVER and this load generator on "
    "the cores LOAD (e.g. 0:1), so that the generator does not share the server's cores "
    "and can really offer the multiple (the capacity is measured pinned too).",
)
@click.option(
    "--queue-spans",
    type=click.IntRange(min=1),
    default=None,
    help="FAULTFINDER_INGEST_QUEUE_SPANS of the sidecar under test (default: its default).",
)
@click.option(
    "--attributors",
    default="first_error",
    show_default=True,
    help="Attributors for failed runs (comma-separated).",
)
@click.option(
    "--plugins", default=None, help="FAULTFINDER_PLUGINS for the sidecar (attributor modules)."
)
@click.option(
    "--aim-at-jobs",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Each kill waits up to this many seconds for a running attribution job.",
)
@click.option(
    "--fuzz",
    type=click.IntRange(min=1),
    default=None,
    help="Run the fuzz suite (tests/integration/fuzz) with this many cases per target.",
)
@click.option(
    "--hostile",
    "hostile_items",
    default=None,
    metavar="ITEMS",
    help="Re-run the hostile probes against real sidecars: 'all' or item numbers (e.g. 1,3,9).",
)
@click.option(
    "--quick",
    is_flag=True,
    help="With --hostile: smaller sizes, lower limits and shorter timeouts (for tests).",
)
@click.option("--seed", type=int, default=None, help="Seed for the kill moments.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where logs and the default SQLite file go (default: a temporary directory).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option(
    "--json-out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the figures as JSON to this file.",
)
def chaos_command(
    database_urls: tuple[str, ...],
    kills: int,
    duration: float,
    overload_factor: float | None,
    overload_duration: float,
    overload_connections: int,
    pin: str | None,
    queue_spans: int | None,
    attributors: str,
    plugins: str | None,
    aim_at_jobs: float,
    fuzz: int | None,
    hostile_items: str | None,
    quick: bool,
    seed: int | None,
    workdir: Path | None,
    as_json: bool,
    json_out: Path | None,
) -> None:
    """Kill the sidecar under load and overload it; count what was acknowledged and stored.

    --kills N: SIGKILL N times at random moments during --duration seconds of ingest,
    restarting on the same database; every acknowledged span must be stored and every
    attribution job finish exactly once. --overload F: offer F × the measured capacity;
    ingest must shed load with 503 + Retry-After, keep answering queries and lose nothing.
    --fuzz N: the hypothesis fuzz suite with N cases per target (needs a source checkout).
    --hostile ITEMS: the eight probes of issue 28 (1 memory, 2 read-only database, 3 chunked
    uploads, 4 slow senders, 5 CSRF, 6 large runs, 7 readiness and a full disk, 8 hostile
    names) and four of issue 55 (9 small bodies that would expand, 10 storage faults and deep
    values, 11 one client holding ingest for others, 12 runs bounded in bytes and a failed
    run over its span cap), each on a fresh database and sidecar
    (on PostgreSQL, a scratch database created beside the one named and dropped afterwards).
    """
    if not kills and overload_factor is None and fuzz is None and hostile_items is None:
        raise click.UsageError(
            "nothing to do: give --kills N, --overload FACTOR, --fuzz N or --hostile ITEMS"
        )
    items, pinning = _parse_items_and_pin(hostile_items, pin)
    if pinning is not None:
        # Threads started from here on (the SDK exporter's, the stores') inherit it.
        os.sched_setaffinity(0, pinning[1])
    console = Console(stderr=True)
    base = workdir or Path(tempfile.mkdtemp(prefix="faultfinder-chaos-"))
    base.mkdir(parents=True, exist_ok=True)
    names = [name.strip() for name in attributors.split(",") if name.strip()]
    env = {"FAULTFINDER_PLUGINS": plugins} if plugins else {}
    if queue_spans is not None:
        env["FAULTFINDER_INGEST_QUEUE_SPANS"] = str(queue_spans)
    kill_drill = KillDrill(
        kills=kills,
        duration=duration,
        attributors=names,
        env=env,
        aim_at_jobs_s=aim_at_jobs,
        seed=seed,
    )
    overload_drill = (
        OverloadDrill(
            factor=overload_factor,
            duration=overload_duration,
            max_in_flight=overload_connections,
        )
        if overload_factor is not None
        else None
    )
    urls = list(database_urls) or [f"sqlite+aiosqlite:///{base / 'chaos.db'}"]
    results: list[dict[str, Any]] = []
    ok = True
    for number, url in enumerate(urls):
        if kills:
            _require_empty(url)
            workdir_kills = _subfolder(base, f"kills-{number}")
            kill_report = _kill_drill(url, workdir_kills, kill_drill, console)
            ok &= _record(results, "kills", "kill chaos", url, kill_report, as_json)
        if overload_drill is not None:
            workdir_overload = _subfolder(base, f"overload-{number}")
            report = _overload_drill(
                url, workdir_overload, env, overload_drill, console, pinning=pinning
            )
            ok &= _record(results, "overload", "overload", url, report, as_json)
    if items:
        findings = _hostile(items, urls, base, quick=quick, as_json=as_json, console=console)
        results.extend({"scenario": "hostile", **finding.as_dict()} for finding in findings)
        ok &= all(finding.holds is not False for finding in findings)
    if fuzz is not None:
        ok &= run_fuzz_suite(fuzz) == 0
    if as_json:
        click.echo(json.dumps(results, indent=2, default=str))
    if json_out is not None:
        json_out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    if not ok:
        sys.exit(1)


def _record(
    results: list[dict[str, Any]],
    scenario: str,
    title: str,
    url: str,
    report: KillReport | OverloadReport,
    as_json: bool,
) -> bool:
    """Keep `report` for the JSON output, or print it now; whether it passed."""
    results.append({"scenario": scenario, **dataclasses.asdict(report)})
    if not as_json:
        click.echo(f"== {title} ({redacted(url)})")
        for line in _report_lines(report):
            click.echo(line)
    return report.ok


def _hostile(
    items: list[int],
    urls: list[str],
    base: Path,
    *,
    quick: bool,
    as_json: bool,
    console: Console,
) -> list[Finding]:
    """Run the hostile drills `items` on every database; print each finding as it comes
    (unless the figures go out as JSON), then one line per item."""

    def show(finding: Finding) -> None:
        if not as_json:
            for line in finding_lines(finding):
                click.echo(line)

    findings = run_hostile(
        items,
        urls,
        base,
        QUICK if quick else FULL,
        lambda message: console.print(message, markup=False, highlight=False),
        on_finding=show,
    )
    if not as_json:
        click.echo("== hostile: summary")
        for finding in findings:
            verdict = {True: "holds", False: "DOES NOT HOLD", None: "not run"}[finding.holds]
            click.echo(f"  item {finding.item} {finding.title:34} {finding.database:50} {verdict}")
    return findings


def _subfolder(base: Path, name: str) -> Path:
    folder = base / name
    folder.mkdir(exist_ok=True)
    return folder


def _kill_drill(url: str, workdir: Path, drill: KillDrill, console: Console) -> KillReport:
    """One kill-chaos run on `url`, with a progress bar."""
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[acked]} spans acknowledged"),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task(f"kill chaos on {redacted(url)}", total=drill.duration, acked=0)

        def advance(elapsed: float, acked: int) -> None:
            bar.update(task, completed=elapsed, acked=acked)

        return run_kill_chaos(url, workdir, drill, progress=advance).report


def _parse_items_and_pin(
    hostile_items: str | None, pin: str | None
) -> tuple[list[int], tuple[set[int], set[int]] | None]:
    try:
        items = parse_items(hostile_items) if hostile_items is not None else []
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--hostile") from None
    try:
        return items, parse_pin(pin) if pin is not None else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--pin") from None


def parse_pin(text: str) -> tuple[set[int], set[int]]:
    """`SERVER:LOAD` core lists (`0:1`, `0,1:2-3`) as two disjoint sets of this machine's
    cores."""
    server_text, colon, load_text = text.partition(":")
    if not colon or not server_text or not load_text:
        raise ValueError(f"give the server's and the load's cores as SERVER:LOAD, not {text!r}")
    available = os.sched_getaffinity(0)
    server, load = _cores(server_text), _cores(load_text)
    if server & load:
        raise ValueError(f"the server and the load share cores {sorted(server & load)}")
    unknown = (server | load) - available
    if unknown:
        raise ValueError(f"no cores {sorted(unknown)} here (available: {sorted(available)})")
    return server, load


def _cores(text: str) -> set[int]:
    cores: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"{part!r} is not a core number or range")
        cores.update(range(int(first), int(last if dash else first) + 1))
    return cores


def _overload_drill(
    url: str,
    workdir: Path,
    env: dict[str, str],
    drill: OverloadDrill,
    console: Console,
    *,
    pinning: tuple[set[int], set[int]] | None = None,
) -> OverloadReport:
    """One overload run against a sidecar started on `url` (on `pinning`'s server cores)."""
    cpus = pinning[0] if pinning is not None else None
    with SidecarProcess(url, workdir, env=env, cpus=cpus) as sidecar:
        console.print(f"overload: measuring capacity of {sidecar.url} …")
        report = run_overload(sidecar.url, drill, server_pid=sidecar.pid, database_url=url).report
    if pinning is not None:
        report.server_cpus, report.load_cpus = sorted(pinning[0]), sorted(pinning[1])
    return report


FUZZ_SUITE = Path(__file__).resolve().parents[3] / "tests" / "integration" / "fuzz"


def run_fuzz_suite(examples: int) -> int:
    """Run the fuzz suite with `examples` cases per target; returns pytest's exit code."""
    if not FUZZ_SUITE.exists():
        raise click.UsageError(
            f"--fuzz runs {FUZZ_SUITE.relative_to(FUZZ_SUITE.parents[2])} from a source "
            "checkout (an editable install); it is not part of the installed package"
        )
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(FUZZ_SUITE),
        "-q",
        "-p",
        "no:cacheprovider",
        "--hypothesis-show-statistics",
    ]
    environment = {**os.environ, "FAULTFINDER_FUZZ_EXAMPLES": str(examples)}
    return subprocess.run(command, cwd=FUZZ_SUITE.parents[2], env=environment).returncode


def _require_empty(database_url: str) -> None:
    spans = asyncio.run(stored_span_count(database_url))
    if spans:
        raise click.UsageError(
            f"--database-url {redacted(database_url)} already holds {spans} spans; "
            "kill chaos counts everything it finds, so give it an empty database"
        )
