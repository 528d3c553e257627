"""Kill chaos: SIGKILL a sidecar at random moments under sustained ingest, restart it on
the same database, and compare what was acknowledged with what was stored and what every
attribution job did."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from faultfinder.drills.chaos.sending import SendTally, send_until_acknowledged
from faultfinder.drills.chaos.stored_state import StoredState, read_stored_state, redacted
from faultfinder.drills.chaos.traffic import ChaosTraffic, SpanKey
from faultfinder.evaluation.sidecar import SidecarProcess

__all__ = ["FAST_LIFECYCLE", "KillChaosOutcome", "KillDrill", "KillReport", "run_kill_chaos"]

FAST_LIFECYCLE = {
    "FAULTFINDER_QUIET_PERIOD": "0.5",
    "FAULTFINDER_SWEEP_INTERVAL": "0.25",
    # A killed process's job lease must run out soon for its job to resume quickly.
    "FAULTFINDER_JOB_LEASE": "3",
    "FAULTFINDER_JOB_MAX_ATTEMPTS": "20",
    "FAULTFINDER_JOB_BACKOFF": "0.2",
}
"""Settings that let a chaos run settle in seconds rather than minutes."""


@dataclass(frozen=True)
class KillDrill:
    """How one kill-chaos run goes: how often and how long, the load, the sidecar's setup."""

    kills: int = 3
    duration: float = 30.0
    """Seconds of ingest; the time spent restarting does not count."""
    concurrency: int = 4
    """Senders posting at the same time."""
    attributors: Sequence[str] = ("first_error",)
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment of the sidecar, over `FAST_LIFECYCLE`."""
    aim_at_jobs_s: float = 0.0
    """Each kill waits up to this long for a moment when an attribution job is running,
    so that kills interrupt jobs."""
    failed_interval_s: float = 1.0
    """Seconds between failed runs in the traffic (each gets attribution jobs)."""
    settle_timeout: float = 120.0
    seed: int | None = None
    """Seed of the kill moments and the traffic (default: a random one, reported)."""


@dataclass
class KillReport:
    """Figures of one kill-chaos run on one database."""

    database: str
    kills: int
    duration_s: float
    seed: int
    requests_acknowledged: int = 0
    spans_acknowledged: int = 0
    spans_stored: int = 0
    acknowledged_but_missing: int = 0
    """Acknowledged spans the database does not hold: must be 0."""
    requests_interrupted: int = 0
    spans_interrupted: int = 0
    """Spans of requests in flight at a kill (never acknowledged)."""
    interrupted_spans_stored: int = 0
    """Of those, how many were committed before the process died."""
    spans_given_up: int = 0
    connection_refusals: int = 0
    """Attempts that found the sidecar down (retried with the same body)."""
    restart_seconds: list[float] = field(default_factory=list)
    kills_during_a_job: int = 0
    failed_runs: int = 0
    jobs_enqueued: int = 0
    jobs_by_status: dict[str, int] = field(default_factory=dict)
    jobs_resumed: int = 0
    """Jobs that needed more than one attempt (their process was killed mid-job)."""
    failed_runs_without_attribution: int = 0
    duplicate_attributions: int = 0
    """(run, method) pairs stored more than once: must be 0."""
    runs_by_status: dict[str, int] = field(default_factory=dict)
    settled: bool = False
    """Every run settled and every job finished before the settle timeout."""
    settle_s: float = 0.0
    """Seconds from the end of ingest until every run and job had settled."""
    wall_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.settled
            and self.spans_given_up == 0
            and self.acknowledged_but_missing == 0
            and self.duplicate_attributions == 0
            and self.failed_runs_without_attribution == 0
            and self.jobs_by_status.get("done", 0) == self.jobs_enqueued
        )


@dataclass
class KillChaosOutcome:
    report: KillReport
    acknowledged: set[SpanKey]
    interrupted: set[SpanKey]


async def _running_jobs(client: httpx.AsyncClient, url: str) -> int:
    try:
        response = await client.get(f"{url}/api/stats", timeout=5)
        return int(response.json()["jobs_by_status"].get("running", 0))
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return 0


async def _settled(client: httpx.AsyncClient, url: str, attributors: Sequence[str]) -> bool:
    """No run still open, every failed run attributed, no job waiting or running."""
    try:
        stats = (await client.get(f"{url}/api/stats", timeout=10)).json()
    except (httpx.HTTPError, ValueError):
        return False
    runs = stats["runs_by_status"]
    jobs = stats["jobs_by_status"]
    open_runs = runs.get("running", 0) + (runs.get("failed", 0) if attributors else 0)
    return bool(open_runs == 0 and jobs.get("queued", 0) == 0 and jobs.get("running", 0) == 0)


async def _kill_chaos(
    sidecar: SidecarProcess,
    traffic: ChaosTraffic,
    report: KillReport,
    tally: SendTally,
    *,
    concurrency: int,
    rng: random.Random,
    aim_at_jobs_s: float,
    progress: Callable[[float, int], None],
) -> None:
    url = f"{sidecar.url}/v1/traces"
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=concurrency + 2, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0), limits=limits) as client:

        async def sender() -> None:
            while not stop.is_set():
                await send_until_acknowledged(client, url, traffic.next_request(), tally)

        async def killer() -> None:
            # Each life of the process lasts a random share of its slot of ingest time;
            # the time spent restarting does not count as ingest time.
            slot = report.duration_s / (report.kills + 1)
            up_total = 0.0
            for _ in range(report.kills):
                life = slot * rng.uniform(0.5, 1.5)
                await asyncio.sleep(life)
                if aim_at_jobs_s > 0:
                    deadline = time.monotonic() + aim_at_jobs_s
                    while time.monotonic() < deadline and not await _running_jobs(
                        client, sidecar.url
                    ):
                        await asyncio.sleep(0.05)
                    life += aim_at_jobs_s - max(0.0, deadline - time.monotonic())
                report.kills_during_a_job += bool(await _running_jobs(client, sidecar.url))
                await asyncio.to_thread(sidecar.kill)
                up_total += life
                report.restart_seconds.append(await asyncio.to_thread(sidecar.start))
            await asyncio.sleep(max(slot * 0.5, report.duration_s - up_total))
            stop.set()

        async def reporter() -> None:
            started = time.monotonic()
            while not stop.is_set():
                progress(time.monotonic() - started, len(tally.acknowledged))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.5)

        await asyncio.gather(killer(), reporter(), *(sender() for _ in range(concurrency)))


async def _await_settled(
    url: str, attributors: Sequence[str], timeout: float
) -> tuple[bool, list[str]]:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            if await _settled(client, url, attributors):
                return True, []
            await asyncio.sleep(0.25)
        try:
            stats = (await client.get(f"{url}/api/stats", timeout=10)).json()
            return False, [f"not settled after {timeout:g} s: {stats}"]
        except (httpx.HTTPError, ValueError) as error:
            return False, [f"not settled after {timeout:g} s: {error}"]


def run_kill_chaos(
    database_url: str,
    workdir: Path,
    drill: KillDrill | None = None,
    *,
    progress: Callable[[float, int], None] | None = None,
) -> KillChaosOutcome:
    """Send distinct runs into a sidecar for `drill.duration` seconds, SIGKILL it
    `drill.kills` times at random moments (restarting it on the same database), then compare
    acknowledged spans with stored ones and attribution jobs enqueued with jobs finished.

    The database must be empty.
    """
    drill = drill or KillDrill()
    seed = drill.seed if drill.seed is not None else int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    report = KillReport(
        database=redacted(database_url), kills=drill.kills, duration_s=drill.duration, seed=seed
    )
    tally = SendTally()
    environment = {
        **FAST_LIFECYCLE,
        "FAULTFINDER_ATTRIBUTORS": ",".join(drill.attributors),
        "FAULTFINDER_WORKERS": "1",
        **drill.env,
    }
    traffic = ChaosTraffic(failed_interval_s=drill.failed_interval_s, seed=rng.getrandbits(64))
    sidecar = SidecarProcess(database_url, workdir, env=environment)
    started = time.monotonic()
    sidecar.start()
    try:
        asyncio.run(
            _kill_chaos(
                sidecar,
                traffic,
                report,
                tally,
                concurrency=drill.concurrency,
                rng=rng,
                aim_at_jobs_s=drill.aim_at_jobs_s,
                progress=progress or (lambda _elapsed, _acked: None),
            )
        )
        settling = time.monotonic()
        report.settled, errors = asyncio.run(
            _await_settled(sidecar.url, drill.attributors, drill.settle_timeout)
        )
        report.settle_s = time.monotonic() - settling
        report.errors.extend(errors)
    finally:
        sidecar.stop()
    report.wall_s = time.monotonic() - started
    state = asyncio.run(read_stored_state(database_url))
    _count(report, tally, state, drill.attributors)
    return KillChaosOutcome(report, tally.acknowledged, tally.interrupted)


def _count(
    report: KillReport, tally: SendTally, state: StoredState, attributors: Sequence[str]
) -> None:
    """Fill `report` from what the senders were told and what the database holds."""
    report.requests_acknowledged = tally.requests_acknowledged
    report.spans_acknowledged = len(tally.acknowledged)
    report.spans_stored = len(state.spans)
    report.acknowledged_but_missing = len(tally.acknowledged - state.spans)
    report.requests_interrupted = tally.requests_interrupted
    report.spans_interrupted = len(tally.interrupted)
    report.interrupted_spans_stored = len(tally.interrupted & state.spans)
    report.spans_given_up = len(tally.given_up)
    report.connection_refusals = tally.connection_refused
    report.failed_runs = len(state.failed_runs)
    report.jobs_enqueued = sum(state.jobs_by_status.values())
    report.jobs_by_status = state.jobs_by_status
    report.jobs_resumed = sum(1 for attempts in state.jobs_attempts if attempts > 1)
    report.failed_runs_without_attribution = sum(
        1
        for run_id in state.failed_runs
        for method in attributors
        if state.attributions[(run_id, method)] == 0
    )
    report.duplicate_attributions = sum(1 for n in state.attributions.values() if n > 1)
    report.runs_by_status = state.runs_by_status
    report.errors.extend(tally.errors)
