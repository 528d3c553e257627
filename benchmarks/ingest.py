"""`faultfinder bench ingest`: load-test an OTLP/HTTP receiver with pre-encoded agent traces and
report accepted and durable throughput, latency, backpressure and memory."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import resource
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import click
import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from faultfinder.benchmarks.otlp_traces import (
    PROTOBUF_CONTENT_TYPE,
    BodyFormat,
    PreparedRequest,
    prepare_requests,
    retry_after_seconds,
    traces_url,
)
from faultfinder.benchmarks.replay import parse_headers
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
_THROTTLE_STATUS = frozenset({429, 503})
_TRANSPORT_RETRIES = 3
_POLL_INTERVAL_S = 0.05


class Verify(StrEnum):
    """How to check that accepted spans were stored."""

    FAULTFINDER = "faultfinder"
    """Poll faultfinder's ingest statistics until every accepted span is stored."""
    NONE = "none"
    """Trust the 2xx answers (any OTLP/HTTP server, e.g. Arize Phoenix)."""


@dataclass
class StageTimes:
    """One server-side ingest stage over the run, from the difference of two scrapes of
    faultfinder's histograms. Quantiles are bucket upper bounds (None: above the largest)."""

    count: int
    total_s: float
    mean_ms: float
    p50_at_most_ms: float | None
    p99_at_most_ms: float | None


@dataclass
class IngestReport:
    """Figures of one ingest benchmark run."""

    url: str
    body_format: str
    gzip: bool
    concurrency: int
    batch: int
    spans_requested: int
    requests: int
    mean_span_bytes: float
    """Serialized size per span before compression."""
    bytes_sent: int = 0
    spans_accepted: int = 0
    spans_rejected: int = 0
    """Spans in requests that finally failed, plus spans a 2xx answer reported as rejected."""
    status_2xx: int = 0
    status_4xx: int = 0
    """4xx answers other than 429."""
    status_5xx: int = 0
    """5xx answers other than 503."""
    throttled: int = 0
    """429 and 503 answers (each is retried after Retry-After)."""
    retries: int = 0
    transport_errors: int = 0
    send_seconds: float = 0.0
    accepted_spans_per_s: float = 0.0
    latency_p50_ms: float = 0.0
    latency_p99_ms: float = 0.0
    durable_spans_per_s: float | None = None
    durable_after_s: float | None = None
    """Seconds from the first send until every accepted span was queryable."""
    spans_stored: int | None = None
    """Growth of the server's stored-span count during the run."""
    lost_spans: int | None = None
    """Accepted but not stored."""
    durability_note: str | None = None
    client_peak_rss_mb: float = 0.0
    server_peak_rss_mb: float | None = None
    """The server process's VmHWM (peak since it started)."""
    server_sampled_peak_rss_mb: float | None = None
    """Highest VmRSS seen while this run was sending and waiting."""
    server_stages: dict[str, StageTimes] | None = None
    """With --verify faultfinder: decode, queue wait and commit times inside the server."""
    writer_busy: float | None = None
    """Share of the time until every span was stored that the server spent committing."""
    errors: list[str] = field(default_factory=list)
    """A few distinct failure messages, for diagnosis."""

    @property
    def ok(self) -> bool:
        """Every span accepted, and (when verified) stored."""
        return self.spans_accepted == self.spans_requested and not self.lost_spans


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def _client_peak_rss_mb() -> float:
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


def _rejected_spans(response: httpx.Response) -> int:
    """`partial_success.rejected_spans` of an OTLP response, 0 when absent or unreadable."""
    if not response.content:
        return 0
    content_type = response.headers.get("content-type", "")
    try:
        if content_type.startswith(PROTOBUF_CONTENT_TYPE):
            return int(
                ExportTraceServiceResponse.FromString(
                    response.content
                ).partial_success.rejected_spans
            )
        if "json" in content_type:
            document = response.json()
            if isinstance(document, dict):
                partial = document.get("partialSuccess") or document.get("partial_success") or {}
                value = partial.get("rejectedSpans", partial.get("rejected_spans", 0))
                return int(value or 0)
    except (ValueError, TypeError, AttributeError):
        return 0
    return 0


class _Run:
    """Shared state of the senders of one benchmark run."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        requests: Sequence[PreparedRequest],
        report: IngestReport,
        *,
        max_retries: int,
        progress: Progress | None,
        task: TaskID | None,
    ) -> None:
        self.client = client
        self.url = url
        self.requests = requests
        self.report = report
        self.max_retries = max_retries
        self.progress = progress
        self.task = task
        self.latencies: list[float] = []
        self.next_index = 0

    def _note_error(self, message: str) -> None:
        if len(self.report.errors) < 5 and message not in self.report.errors:
            self.report.errors.append(message)

    async def sender(self) -> None:
        while self.next_index < len(self.requests):
            prepared = self.requests[self.next_index]
            self.next_index += 1
            await self._send(prepared)
            if self.progress is not None and self.task is not None:
                self.progress.update(
                    self.task, advance=prepared.spans, accepted=self.report.spans_accepted
                )

    async def _send(self, prepared: PreparedRequest) -> None:
        report = self.report
        throttled = transport_failures = 0
        while True:
            started = time.perf_counter()
            try:
                response = await self.client.post(
                    self.url, content=prepared.body, headers=prepared.headers
                )
            except httpx.HTTPError as error:
                report.transport_errors += 1
                transport_failures += 1
                self._note_error(f"{type(error).__name__}: {error}")
                if transport_failures > _TRANSPORT_RETRIES:
                    report.spans_rejected += prepared.spans
                    return
                report.retries += 1
                await asyncio.sleep(0.25 * 2**transport_failures)
                continue
            self.latencies.append(time.perf_counter() - started)
            report.bytes_sent += len(prepared.body)
            status = response.status_code
            if response.is_success:
                report.status_2xx += 1
                rejected = min(_rejected_spans(response), prepared.spans)
                report.spans_accepted += prepared.spans - rejected
                report.spans_rejected += rejected
                return
            if status in _THROTTLE_STATUS:
                report.throttled += 1
                throttled += 1
                if throttled > self.max_retries:
                    self._note_error(
                        f"HTTP {status}: still throttled after {self.max_retries} retries"
                    )
                    report.spans_rejected += prepared.spans
                    return
                report.retries += 1
                await asyncio.sleep(
                    retry_after_seconds(response.headers.get("retry-after"), default=1.0, cap=30.0)
                )
                continue
            if status >= 500:
                report.status_5xx += 1
            else:
                report.status_4xx += 1
            self._note_error(f"HTTP {status}: {response.text[:200]}")
            report.spans_rejected += prepared.spans
            return


async def _stored_spans(client: httpx.AsyncClient, stats_url: str) -> int | str:
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


_Histogram = tuple[dict[float, float], float, float]
"""Cumulative count per bucket bound (`inf` for +Inf), sum of seconds, count."""


async def _server_histograms(client: httpx.AsyncClient, url: str) -> dict[str, _Histogram]:
    """faultfinder's ingest histograms from its /metrics; empty when it has none."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        response = await client.get(url)
    except httpx.HTTPError:
        return {}
    if response.status_code != 200:
        return {}
    wanted = {name for _, name in SERVER_STAGES}
    found: dict[str, _Histogram] = {}
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


def _stage_times(before: _Histogram | None, after: _Histogram) -> StageTimes:
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


async def _sample_server_memory(pid: int, report: IngestReport, stop: asyncio.Event) -> None:
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


async def run_ingest(
    to: str,
    requests: Sequence[PreparedRequest],
    *,
    concurrency: int = 8,
    verify: Verify | str = Verify.NONE,
    timeout: float = 30.0,
    settle_timeout: float = 30.0,
    max_retries: int = 20,
    headers: Mapping[str, str] | None = None,
    server_pid: int | None = None,
    progress: Progress | None = None,
) -> IngestReport:
    """POST `requests` to `to`'s OTLP/HTTP endpoint over `concurrency` connections and measure."""
    if not requests:
        raise ValueError("no requests to send")
    verify = Verify(verify)
    url = traces_url(to)
    base = url.removesuffix("/v1/traces")
    first = requests[0]
    raw = sum(r.raw_size for r in requests)
    spans = sum(r.spans for r in requests)
    report = IngestReport(
        url=url,
        body_format=BodyFormat.PROTOBUF.value
        if first.headers.get("content-type") == PROTOBUF_CONTENT_TYPE
        else BodyFormat.JSON.value,
        gzip="content-encoding" in first.headers,
        concurrency=concurrency,
        batch=first.spans,
        spans_requested=spans,
        requests=len(requests),
        mean_span_bytes=raw / spans,
    )
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(timeout), limits=limits, headers=dict(headers or {})
    ) as client:
        baseline: int | None = None
        stages_before: dict[str, _Histogram] = {}
        if verify is Verify.FAULTFINDER:
            outcome = await _stored_spans(client, base + STATS_INGEST_PATH)
            if isinstance(outcome, int):
                baseline = outcome
                stages_before = await _server_histograms(client, base + METRICS_PATH)
            else:
                report.durability_note = outcome

        stop_sampling = asyncio.Event()
        sampler = (
            asyncio.create_task(_sample_server_memory(server_pid, report, stop_sampling))
            if server_pid is not None
            else None
        )
        task = None
        if progress is not None:
            task = progress.add_task("sending", total=spans, accepted=0)
        run = _Run(
            client, url, requests, report, max_retries=max_retries, progress=progress, task=task
        )
        started = time.perf_counter()
        await asyncio.gather(*(run.sender() for _ in range(max(1, concurrency))))
        report.send_seconds = time.perf_counter() - started
        if report.send_seconds > 0:
            report.accepted_spans_per_s = report.spans_accepted / report.send_seconds
        report.latency_p50_ms = percentile(run.latencies, 0.50) * 1000
        report.latency_p99_ms = percentile(run.latencies, 0.99) * 1000

        if baseline is not None:
            await _await_durability(
                client,
                base + STATS_INGEST_PATH,
                report,
                baseline,
                started,
                settle_timeout,
                progress,
            )
            if stages_before:
                after = await _server_histograms(client, base + METRICS_PATH)
                report.server_stages = {
                    stage: _stage_times(stages_before.get(name), after[name])
                    for stage, name in SERVER_STAGES
                    if name in after
                }
                commits = report.server_stages.get("commit")
                if commits is not None and report.durable_after_s:
                    report.writer_busy = commits.total_s / report.durable_after_s
        stop_sampling.set()
        if sampler is not None:
            await sampler

    report.client_peak_rss_mb = _client_peak_rss_mb()
    if server_pid is not None:
        hwm = process_memory_kb(server_pid).get("VmHWM")
        report.server_peak_rss_mb = hwm / 1024 if hwm is not None else None
        if hwm is None and report.server_sampled_peak_rss_mb is None:
            report.errors.append(f"/proc/{server_pid}/status is not readable")
    return report


async def _await_durability(
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
        outcome = await _stored_spans(client, stats_url)
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


def _progress_bar(console: Console, enabled: bool) -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("spans"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not enabled,
    )


def ingest(
    to: str,
    spans: int,
    *,
    concurrency: int = 8,
    batch: int = 100,
    body_format: BodyFormat | str = BodyFormat.PROTOBUF,
    gzip: bool = False,
    project: str | None = None,
    verify: Verify | str = Verify.NONE,
    timeout: float = 30.0,
    settle_timeout: float = 30.0,
    max_retries: int = 20,
    headers: Mapping[str, str] | None = None,
    server_pid: int | None = None,
    progress: bool = True,
) -> IngestReport:
    """Build `spans` spans of agent runs, encode them, then send and measure (see `run_ingest`)."""
    if spans < 1:
        raise ValueError(f"spans must be at least 1, got {spans}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    with _progress_bar(Console(stderr=True), progress) as bar:
        preparing = bar.add_task("encoding", total=spans)
        requests = prepare_requests(
            spans,
            batch=batch,
            body_format=BodyFormat(body_format),
            gzip=gzip,
            project=project,
            on_request=lambda prepared: bar.update(preparing, advance=prepared.spans),
        )
        return asyncio.run(
            run_ingest(
                to,
                requests,
                concurrency=concurrency,
                verify=verify,
                timeout=timeout,
                settle_timeout=settle_timeout,
                max_retries=max_retries,
                headers=headers,
                server_pid=server_pid,
                progress=bar if progress else None,
            )
        )


def report_lines(report: IngestReport) -> list[str]:
    """The report as aligned human-readable lines."""
    codec = report.body_format + (", gzip" if report.gzip else "")
    lines = [
        f"target            {report.url} ({codec}, {report.batch} spans/request, "
        f"{report.concurrency} connections)",
        f"spans             {report.spans_requested} requested in {report.requests} requests, "
        f"{report.spans_accepted} accepted, {report.spans_rejected} rejected "
        f"({report.mean_span_bytes:.0f} B/span)",
        f"accepted          {report.accepted_spans_per_s:.0f} spans/s over "
        f"{report.send_seconds:.2f} s",
        f"latency           p50 {report.latency_p50_ms:.1f} ms, p99 {report.latency_p99_ms:.1f} ms",
        f"responses         2xx {report.status_2xx}, 4xx {report.status_4xx}, "
        f"5xx {report.status_5xx}, 429/503 {report.throttled} "
        f"({report.retries} retries), transport errors {report.transport_errors}",
    ]
    if report.durable_spans_per_s is not None and report.durable_after_s is not None:
        lines.append(
            f"durable           {report.durable_spans_per_s:.0f} spans/s "
            f"(all stored {report.durable_after_s:.2f} s after the first send)"
        )
    if report.lost_spans is not None:
        lines.append(f"lost              {report.lost_spans} spans (stored {report.spans_stored})")
    if report.durability_note:
        lines.append(f"durability        {report.durability_note}")
    for stage, times in (report.server_stages or {}).items():
        label = {"decode": "decoding", "queue_wait": "queue wait", "commit": "commits"}[stage]
        what = "transactions" if stage == "commit" else "requests"
        lines.append(
            f"server {label:<11}{times.count} {what}, mean {times.mean_ms:.1f} ms, "
            f"p50 ≤ {_bound(times.p50_at_most_ms)}, p99 ≤ {_bound(times.p99_at_most_ms)}"
            + (
                f"; writer busy {report.writer_busy:.0%} of the run"
                if stage == "commit" and report.writer_busy is not None
                else ""
            )
        )
    lines.append(f"client peak RSS   {report.client_peak_rss_mb:.0f} MB")
    if report.server_peak_rss_mb is not None or report.server_sampled_peak_rss_mb is not None:
        peak = f"{report.server_peak_rss_mb:.0f} MB" if report.server_peak_rss_mb else "n/a"
        sampled = report.server_sampled_peak_rss_mb
        lines.append(
            f"server peak RSS   {peak} (VmHWM)"
            + (f", {sampled:.0f} MB sampled during the run" if sampled is not None else "")
        )
    lines.extend(f"error             {message}" for message in report.errors)
    return lines


def _bound(milliseconds: float | None) -> str:
    if milliseconds is None:
        return "∞ (above the largest bucket)"
    return f"{milliseconds:g} ms"


@click.command(name="ingest")
@click.option(
    "--to", required=True, help="Base URL of the OTLP/HTTP server, e.g. http://127.0.0.1:6006."
)
@click.option("--spans", type=click.IntRange(min=1), required=True, help="Spans to send in total.")
@click.option(
    "--concurrency", type=click.IntRange(min=1), default=8, show_default=True, help="Connections."
)
@click.option(
    "--batch", type=click.IntRange(min=1), default=100, show_default=True, help="Spans per request."
)
@click.option(
    "--format",
    "body_format",
    type=click.Choice([f.value for f in BodyFormat]),
    default=BodyFormat.PROTOBUF.value,
    show_default=True,
)
@click.option("--gzip", is_flag=True, help="gzip request bodies (Content-Encoding: gzip).")
@click.option("--project", default=None, help="Project name (resource attribute).")
@click.option(
    "--verify",
    type=click.Choice([v.value for v in Verify]),
    default=Verify.FAULTFINDER.value,
    show_default=True,
    help=f"faultfinder: poll {STATS_INGEST_PATH} until every span is stored; "
    "none: trust 2xx (any OTLP server).",
)
@click.option("--server-pid", type=int, default=None, help="Report this process's peak RSS.")
@click.option("--headers", default=None, help="Extra request headers: k=v,k2=v2.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds per request.",
)
@click.option(
    "--settle-timeout",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="With --verify faultfinder: give up once the stored count has not grown for this long.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def ingest_command(
    to: str,
    spans: int,
    concurrency: int,
    batch: int,
    body_format: str,
    gzip: bool,
    project: str | None,
    verify: str,
    server_pid: int | None,
    headers: str | None,
    timeout: float,
    settle_timeout: float,
    as_json: bool,
    no_progress: bool,
) -> None:
    """Load-test OTLP/HTTP ingest with realistic multi-agent traces (≈2.5 KB per span).

    Request bodies are built in memory before the clock starts, so the figures measure
    the server, not the client's encoding.
    """
    try:
        extra_headers = parse_headers(headers)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--headers") from error
    report = ingest(
        to,
        spans,
        concurrency=concurrency,
        batch=batch,
        body_format=body_format,
        gzip=gzip,
        project=project,
        verify=verify,
        timeout=timeout,
        settle_timeout=settle_timeout,
        headers=extra_headers,
        server_pid=server_pid,
        progress=not no_progress,
    )
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(report), indent=2))
    else:
        for line in report_lines(report):
            click.echo(line)
    if not report.ok:
        sys.exit(1)
