"""`faultfinder bench attribution-latency`: how long a failed run waits for its verdict.

A real `faultfinder serve` stores realistic multi-agent runs; then, one run at a time,
the benchmark posts `{"outcome": "failure"}` (a grader's verdict) and polls the run's
jobs until the attribution of the first configured attributor (the dashboard's leading
answer) is stored, and until every configured attributor's is. Reported: p50/p90/p99
and the worst of both, from the POST to the stored attribution as a client sees it.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
import httpx
from rich.console import Console

from faultfinder.benchmarks.ingest import percentile
from faultfinder.benchmarks.otlp_traces import prepare_requests, traces_url
from faultfinder.benchmarks.sidecar import SidecarProcess
from faultfinder.server.progress import Progress

POLL_S = 0.002
"""Seconds between polls of a run's jobs (the resolution of the figures)."""


def _figures(values: Sequence[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {
        "p50_ms": round(statistics.median(ms), 1),
        "p90_ms": round(percentile(ms, 0.9), 1),
        "p99_ms": round(percentile(ms, 0.99), 1),
        "max_ms": round(max(ms), 1),
    }


def _wait_for_attributions(
    api: httpx.Client, run_id: str, attributors: Sequence[str], began: float, timeout: float
) -> tuple[float, float]:
    """Seconds from `began` until the first attributor's attribution is stored, and until
    all of them are."""
    first = None
    path = f"/api/runs/{quote(run_id, safe='')}/jobs"
    deadline = began + timeout
    while time.perf_counter() < deadline:
        jobs = api.get(path).json()
        done = {job["attributor"] for job in jobs if job["status"] == "done"}
        now = time.perf_counter()
        if first is None and attributors[0] in done:
            first = now - began
        if done >= set(attributors):
            return first if first is not None else now - began, now - began
        time.sleep(POLL_S)
    raise RuntimeError(f"run {run_id}: no attributions within {timeout:g} s")


def measure(
    sidecar: SidecarProcess,
    *,
    runs: int,
    attributors: Sequence[str],
    gap_s: float,
    timeout_s: float,
) -> dict[str, Any]:
    """Store `runs` runs, post each one's failure in turn, time its attributions."""
    requests = prepare_requests(runs * 40, batch=200, seed=7)
    with httpx.Client(base_url=sidecar.url, timeout=30) as api:
        for request in requests:
            answer = api.post(traces_url(""), content=request.body, headers=request.headers)
            answer.raise_for_status()
        run_ids: list[str] = []
        cursor = None
        while len(run_ids) < runs:
            params: dict[str, str | int] = {"limit": 500}
            if cursor is not None:
                params["cursor"] = cursor
            page = api.get("/api/runs", params=params).json()
            run_ids += [item["id"] for item in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        run_ids = run_ids[:runs]
        answered: list[float] = []
        first: list[float] = []
        every: list[float] = []
        with Progress(console=Console(stderr=True)) as progress:
            task = progress.add_task("outcome → attribution", total=len(run_ids))
            for run_id in run_ids:
                began = time.perf_counter()
                posted = api.post(
                    f"/api/runs/{quote(run_id, safe='')}/outcome", json={"outcome": "failure"}
                )
                posted.raise_for_status()
                answered.append(time.perf_counter() - began)
                lead, done = _wait_for_attributions(api, run_id, attributors, began, timeout_s)
                first.append(lead)
                every.append(done)
                progress.advance(task)
                time.sleep(gap_s)
    return {
        "runs": len(run_ids),
        "attributors": list(attributors),
        "outcome_answered": _figures(answered),
        "first_attributor": _figures(first),
        "all_attributors": _figures(every),
    }


@click.command(name="attribution-latency")
@click.option("--runs", type=click.IntRange(min=1), default=200, show_default=True)
@click.option(
    "--attributors",
    default="learned,first_error",
    show_default=True,
    help="FAULTFINDER_ATTRIBUTORS of the sidecar (the first leads).",
)
@click.option("--database-url", default=None, help="An empty database (default: new SQLite).")
@click.option(
    "--gap",
    type=click.FloatRange(min=0),
    default=0.05,
    show_default=True,
    help="Seconds between one run's attributions and the next outcome.",
)
@click.option("--timeout", type=click.FloatRange(min=1), default=60.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def attribution_latency_command(
    runs: int,
    attributors: str,
    database_url: str | None,
    gap: float,
    timeout: float,
    as_json: bool,
) -> None:
    """Time from a posted failure to the stored attribution, on a real sidecar."""
    names = [name.strip() for name in attributors.split(",") if name.strip()]
    if not names:
        raise click.UsageError("--attributors names none")
    workdir = Path(tempfile.mkdtemp(prefix="faultfinder-latency-"))
    url = database_url or f"sqlite+aiosqlite:///{workdir / 'latency.db'}"
    env = {
        "FAULTFINDER_ATTRIBUTORS": ",".join(names),
        # Runs settle only through their posted outcome, never by going quiet.
        "FAULTFINDER_QUIET_PERIOD": "3600",
    }
    with SidecarProcess(url, workdir, env=env) as sidecar:
        figures = measure(sidecar, runs=runs, attributors=names, gap_s=gap, timeout_s=timeout)
    if as_json:
        click.echo(json.dumps(figures, indent=2))
        return
    click.echo(f"runs: {figures['runs']}; attributors: {', '.join(names)}")
    for key, title in (
        ("outcome_answered", "outcome POST answered"),
        ("first_attributor", f"outcome → {names[0]} stored"),
        ("all_attributors", "outcome → all stored"),
    ):
        values = figures[key]
        click.echo(
            f"{title:32} p50 {values['p50_ms']} ms  p90 {values['p90_ms']} ms  "
            f"p99 {values['p99_ms']} ms  max {values['max_ms']} ms"
        )
