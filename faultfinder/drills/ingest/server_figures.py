"""What the ingest benchmark reads from the server under load: its stored-span count
(durability), its ingest histograms (where a request's time goes) and its memory."""

from __future__ import annotations

import asyncio
import math
import resource
import time
from pathlib import Path

import httpx

from faultfinder.drills.ingest.report import IngestReport, StageTimes
from faultfinder.server.progress import Progress

STATS_INGEST_PATH = "/api/stats/ingest"
"""faultfinder's ingest statistics endpoint: JSON `{"spans_stored": int, ...}`."""
METRICS_PATH = "/metrics"
SERVER_STAGES = (
    ("decode", "faultfinder_ingest_decode_seconds"),
    ("queue_wait", "faultfinder_ingest_queue_wait_seconds"),
    ("commit", "faultfinder_ingest_commit_seconds"),
)
"""faultfinder's ingest histograms: where a request's time goes inside the server."""
_POLL_INTERVAL_S = 0.05

Histogram = tuple[dict[float, float], float, float]
"""Cumulative count per bucket bound (`inf` for +Inf), sum of seconds, count."""


def client_peak_rss_mb() -> float:
    """This process's peak resident memory in MB."""
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def process_memory_kb(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM (KiB) of a process from /proc/PID/status; empty if unreadable."""
    figures: dict[str, int] = {}
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return figures
    for line in lines:
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            figures[key] = int(value.split()[0])
    return figures


async def sample_server_memory(pid: int, report: IngestReport, stop: asyncio.Event) -> None:
    """Keep the highest VmRSS of `pid` in `report` until `stop` is set (every 0.1 s)."""
    while True:
        rss = process_memory_kb(pid).get("VmRSS")
        if rss is not None:
            peak = max(report.server_sampled_peak_rss_mb or 0.0, rss / 1024)
            report.server_sampled_peak_rss_mb = peak
        try:
            await asyncio.wait_for(stop.wait(), timeout=0.1)
            return
        except TimeoutError:
            continue


async def stored_spans(client: httpx.AsyncClient, stats_url: str) -> int | str:
    """The server's stored-span count, or why it cannot be read."""
    try:
        response = await client.get(stats_url)
    except httpx.HTTPError as error:
        return f"GET {stats_url} failed: {type(error).__name__}: {error}"
    if response.status_code == 404:
        return f"durability not measurable on this server (GET {STATS_INGEST_PATH} → 404)"
    if not response.is_success:
        return f"durability not measurable: GET {STATS_INGEST_PATH} → HTTP {response.status_code}"
    try:
        stored = response.json()["spans_stored"]
        return int(stored)
    except (ValueError, KeyError, TypeError):
        return f"durability not measurable: GET {STATS_INGEST_PATH} has no integer spans_stored"


async def server_histograms(client: httpx.AsyncClient, url: str) -> dict[str, Histogram]:
    """faultfinder's ingest histograms from its /metrics; empty when it has none."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        response = await client.get(url)
    except httpx.HTTPError:
        return {}
    if response.status_code != 200:
        return {}
    wanted = {name for _, name in SERVER_STAGES}
    found: dict[str, Histogram] = {}
    try:
        for family in text_string_to_metric_families(response.text):
            if family.name not in wanted or family.type != "histogram":
                continue
            buckets: dict[float, float] = {}
            total = count = 0.0
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    buckets[float(sample.labels["le"])] = sample.value
                elif sample.name.endswith("_sum"):
                    total = sample.value
                elif sample.name.endswith("_count"):
                    count = sample.value
            found[family.name] = (buckets, total, count)
    except ValueError:
        return {}
    return found


def stage_times(before: Histogram | None, after: Histogram) -> StageTimes:
    """What happened between two scrapes of one histogram."""
    earlier = before or ({}, 0.0, 0.0)
    count = after[2] - earlier[2]
    buckets = sorted((bound, after[0][bound] - earlier[0].get(bound, 0.0)) for bound in after[0])

    def at_most(q: float) -> float | None:
        for bound, cumulative in buckets:
            if cumulative >= q * count:
                return None if math.isinf(bound) else bound * 1000
        return None

    total = after[1] - earlier[1]
    return StageTimes(
        count=int(count),
        total_s=total,
        mean_ms=total / count * 1000 if count else 0.0,
        p50_at_most_ms=at_most(0.5) if count else None,
        p99_at_most_ms=at_most(0.99) if count else None,
    )


async def await_durability(
    client: httpx.AsyncClient,
    stats_url: str,
    report: IngestReport,
    baseline: int,
    started: float,
    settle_timeout: float,
    progress: Progress | None,
) -> None:
    """Poll the stored-span count until every accepted span is stored or it stops growing."""
    task = None
    if progress is not None:
        task = progress.add_task("awaiting storage", total=report.spans_accepted, accepted=0)
    stored = 0
    last_growth = time.perf_counter()
    while True:
        outcome = await stored_spans(client, stats_url)
        now = time.perf_counter()
        if not isinstance(outcome, int):
            report.durability_note = outcome
            return
        grown = max(outcome - baseline, 0)
        if grown > stored:
            stored, last_growth = grown, now
        if progress is not None and task is not None:
            progress.update(task, completed=min(stored, report.spans_accepted), accepted=stored)
        if stored >= report.spans_accepted:
            report.durable_after_s = now - started
            if report.durable_after_s > 0:
                report.durable_spans_per_s = report.spans_accepted / report.durable_after_s
            break
        if now - last_growth > settle_timeout:
            report.durability_note = (
                f"{report.spans_accepted - stored} accepted spans not stored "
                f"{settle_timeout:g} s after the count last grew"
            )
            break
        await asyncio.sleep(_POLL_INTERVAL_S)
    report.spans_stored = stored
    report.lost_spans = max(report.spans_accepted - stored, 0)
