"""`faultfinder demo`: the sidecar on SQLite, a few Who&When failures replayed through
OTLP, and their attributions printed beside the labelled culprits."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
import httpx
import uvicorn

from faultfinder.datasets import BenchmarkRecord, DatasetError, load_dataset
from faultfinder.server.app import create_app
from faultfinder.server.settings import Settings


def pick_records(datasets_dir: Path | None, count: int) -> list[BenchmarkRecord]:
    """A few records from each Who&When subset, the same ones every time."""
    per_subset = max(1, (count + 1) // 2)
    picked: list[BenchmarkRecord] = []
    for spec in ("who_and_when:algorithm-generated", "who_and_when:hand-crafted"):
        picked.extend(itertools.islice(load_dataset(spec, datasets_dir), per_subset))
    return picked[:count]


async def _wait_ready(url: str, server: uvicorn.Server, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=url, timeout=2) as client:
        while time.monotonic() < deadline:
            if server.should_exit:
                raise click.ClickException("the sidecar stopped while starting")
            with contextlib.suppress(httpx.TransportError):
                if (await client.get("/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.2)
    raise click.ClickException(f"the sidecar at {url} was not ready after {timeout:g}s")


async def _attributed_runs(
    url: str, expected: int, attributors: Sequence[str], timeout: float
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        while True:
            page = (await client.get("/api/runs", params={"limit": 500})).json()
            runs: list[dict[str, Any]] = page["items"]
            done = [
                run for run in runs
                if {a["method"] for a in run["attributions"]} >= set(attributors)
            ]  # fmt: skip
            click.echo(
                f"\r  runs received {len(runs)}/{expected}, attributed {len(done)}/{expected}",
                nl=False,
                err=True,
            )
            if len(done) >= expected or time.monotonic() > deadline:
                click.echo("", err=True)
                return runs
            await asyncio.sleep(0.5)


def _print_report(runs: list[dict[str, Any]], records: list[BenchmarkRecord]) -> None:
    gold = {record.record_id: record.gold for record in records}
    for run in runs:
        click.echo(
            f"\nrun {run['id']}  ({run['n_steps']} steps; agents: {', '.join(run['agents'])})"
        )
        label = gold.get(run.get("record") or "")
        if label is not None:
            click.echo(f"  {'labelled culprit':<20} {label.agent} at step {label.step}")
        for attribution in run["attributions"]:
            if attribution["status"] == "ok":
                line = (
                    f"  {attribution['method']:<20} {attribution['agent']} at step "
                    f"{attribution['step']}: {textwrap.shorten(attribution['reason'], 320)}"
                )
                click.echo(textwrap.fill(line, width=110, subsequent_indent=" " * 23))
            else:
                click.echo(f"  {attribution['method']:<20} failed: {attribution['failure_reason']}")


async def run_demo(
    settings: Settings, records: list[BenchmarkRecord], *, serve: bool, timeout: float
) -> None:
    from faultfinder.evaluation.replay import replay

    url = f"http://{settings.host}:{settings.port}"
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            host=settings.host,
            port=settings.port,
            loop="asyncio",
            log_level="warning",
            access_log=False,
            timeout_keep_alive=settings.keep_alive,
        )
    )
    serving = asyncio.create_task(server.serve())
    try:
        await _wait_ready(url, server)
        click.echo(f"faultfinder sidecar on {url} (database {settings.database_url})", err=True)
        click.echo(f"replaying {len(records)} Who&When failures through OTLP/HTTP …", err=True)
        result = await asyncio.to_thread(replay, records, to=url, project="demo", progress=True)
        if result.failures:
            raise click.ClickException(f"{result.failures} OTLP exports failed")
        runs = await _attributed_runs(url, len(records), settings.attributors, timeout)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            for run in runs:
                detail = (await client.get(f"/api/runs/{quote(run['id'], safe='')}")).json()
                run["record"] = detail["trajectory"]["metadata"].get("record")
        _print_report(runs, records)
        if "learned" in settings.attributors:
            click.echo(
                "\nnote: the shipped `learned` model was trained on all of Who&When, so its "
                "answers on these records are not a measure of accuracy; held-out figures are "
                "in reports/learned.md.",
                err=True,
            )
        click.echo(
            f"\ndashboard: {url}/ui   runs: {url}/api/runs   OpenAPI: {url}/schema", err=True
        )
        if serve:
            click.echo("serving until Ctrl-C …", err=True)
            await serving
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await serving


def demo_main(
    settings: Settings, *, datasets_dir: Path | None, records: int, serve: bool, timeout: float
) -> None:
    try:
        picked = pick_records(datasets_dir, records)
    except DatasetError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        asyncio.run(run_demo(settings, picked, serve=serve, timeout=timeout))
    except KeyboardInterrupt:
        sys.exit(130)
