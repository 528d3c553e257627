"""`faultfinder bench attribution-latency`: how long a failed run waits for its verdict.

A real `faultfinder serve` stores realistic multi-agent runs; then, one run at a time,
the benchmark posts `{"outcome": "failure"}` (a grader's verdict) and waits for the
attribution of the first configured attributor (the dashboard's leading answer) to be
stored, and for every configured attributor's. It learns of them as the dashboard does,
from the sidecar's server-sent events (`/ui/events`, event `attribution`), so that no
polling competes with the worker for the server's two cores; `--poll` polls the run's
jobs instead. Reported: p50/p90/p99 and the worst of both, from the POST to the stored
attribution as a client sees it.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
import httpx
from rich.console import Console

from faultfinder.drills.ingest import percentile
from faultfinder.drills.otlp_traces import prepare_requests
from faultfinder.evaluation.replay.otlp_http import traces_url
from faultfinder.evaluation.sidecar import SidecarProcess
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


class AttributionEvents:
    """Listens to the sidecar's server-sent events in a thread and notes when each
    (run, attributor) attribution was announced; reconnects (resuming after the last
    event id) when the server ends a stream."""

    def __init__(self, base_url: str) -> None:
        self._client = httpx.Client(base_url=base_url, timeout=httpx.Timeout(30, read=60))
        self._seen: dict[tuple[str, str], float] = {}
        self._missed = False
        """The stream lost events (the server answered `reset`): its times are unusable."""
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._connected = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="sse", daemon=True)

    def __enter__(self) -> AttributionEvents:
        self._thread.start()
        if not self._connected.wait(30):
            raise RuntimeError("the sidecar's event stream did not open within 30 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._client.close()
        self._thread.join(5)

    def _messages(self, last_id: str | None) -> Iterator[tuple[str | None, str, str]]:
        headers = {"accept": "text/event-stream"}
        if last_id is not None:
            headers["last-event-id"] = last_id
        with self._client.stream("GET", "/ui/events", headers=headers) as stream:
            stream.raise_for_status()
            event_id: str | None = None
            kind = "message"
            data: list[str] = []
            for line in stream.iter_lines():
                if line.startswith(":"):
                    self._connected.set()
                elif not line:
                    if data:
                        yield event_id, kind, "\n".join(data)
                    event_id, kind, data = None, "message", []
                else:
                    name, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if name == "id":
                        event_id = value
                    elif name == "event":
                        kind = value
                    elif name == "data":
                        data.append(value)

    def _listen(self) -> None:
        last_id: str | None = None
        while not self._stop.is_set():
            try:
                for event_id, kind, data in self._messages(last_id):
                    last_id = event_id or last_id
                    if kind == "reset":
                        with self._changed:
                            self._missed = True
                            self._changed.notify_all()
                        return
                    if kind != "attribution":
                        continue
                    event = json.loads(data)
                    with self._changed:
                        key = (event["run_id"], event["method"])
                        self._seen.setdefault(key, time.perf_counter())
                        self._changed.notify_all()
            except httpx.HTTPError:
                if self._stop.is_set():
                    return
                time.sleep(0.05)

    def wait(
        self, run_id: str, attributors: Sequence[str], began: float, timeout: float
    ) -> tuple[float, float]:
        """Seconds from `began` until the first attributor's attribution was announced,
        and until all of them were."""
        keys = [(run_id, name) for name in attributors]
        with self._changed:
            if not self._changed.wait_for(
                lambda: self._missed or all(key in self._seen for key in keys), timeout
            ):
                raise RuntimeError(f"run {run_id}: no attributions within {timeout:g} s")
            if self._missed:
                raise RuntimeError("the event stream lost events; rerun, or use --poll")
            times = [self._seen[key] for key in keys]
        return times[0] - began, max(times) - began


def measure(
    sidecar: SidecarProcess,
    *,
    runs: int,
    attributors: Sequence[str],
    gap_s: float,
    timeout_s: float,
    poll: bool = False,
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
        with contextlib.ExitStack() as stack:
            events = None if poll else stack.enter_context(AttributionEvents(sidecar.url))
            progress = stack.enter_context(Progress(console=Console(stderr=True)))
            task = progress.add_task("outcome → attribution", total=len(run_ids))
            for run_id in run_ids:
                began = time.perf_counter()
                posted = api.post(
                    f"/api/runs/{quote(run_id, safe='')}/outcome", json={"outcome": "failure"}
                )
                posted.raise_for_status()
                answered.append(time.perf_counter() - began)
                if events is None:
                    lead, done = _wait_for_attributions(api, run_id, attributors, began, timeout_s)
                else:
                    lead, done = events.wait(run_id, attributors, began, timeout_s)
                first.append(lead)
                every.append(done)
                progress.advance(task)
                time.sleep(gap_s)
    return {
        "runs": len(run_ids),
        "attributors": list(attributors),
        "waited_by": "polling" if poll else "server-sent events",
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
@click.option(
    "--poll",
    is_flag=True,
    help=f"Poll the run's jobs every {POLL_S * 1000:g} ms instead of listening to events.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def attribution_latency_command(
    runs: int,
    attributors: str,
    database_url: str | None,
    gap: float,
    timeout: float,
    poll: bool,
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
        figures = measure(
            sidecar, runs=runs, attributors=names, gap_s=gap, timeout_s=timeout, poll=poll
        )
    if as_json:
        click.echo(json.dumps(figures, indent=2))
        return
    click.echo(
        f"runs: {figures['runs']}; attributors: {', '.join(names)}; "
        f"waited by {figures['waited_by']}"
    )
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
