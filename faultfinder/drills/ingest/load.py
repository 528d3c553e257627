"""The load generator: pre-encoded OTLP requests sent over a fixed number of connections,
retried on throttling and transport errors, measured, and checked for durability."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypedDict, Unpack

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

from faultfinder.drills.ingest.report import IngestReport, percentile
from faultfinder.drills.ingest.server_figures import (
    METRICS_PATH,
    SERVER_STAGES,
    STATS_INGEST_PATH,
    Histogram,
    await_durability,
    client_peak_rss_mb,
    process_memory_kb,
    sample_server_memory,
    server_histograms,
    stage_times,
    stored_spans,
)
from faultfinder.drills.otlp_traces import (
    BodyFormat,
    PreparedRequest,
    prepare_requests,
)
from faultfinder.evaluation.replay.otlp_http import (
    PROTOBUF_CONTENT_TYPE,
    retry_after_seconds,
    traces_url,
)
from faultfinder.server.progress import Progress

DEFAULT_CONCURRENCY = 8
_THROTTLE_STATUS = frozenset({429, 503})
_TRANSPORT_RETRIES = 3


class Verify(StrEnum):
    """How to check that accepted spans were stored."""

    FAULTFINDER = "faultfinder"
    """Poll faultfinder's ingest statistics until every accepted span is stored."""
    NONE = "none"
    """Trust the 2xx answers (any OTLP/HTTP server, e.g. Arize Phoenix)."""


class SendOptions(TypedDict, total=False):
    """How `run_ingest` sends and what it measures."""

    concurrency: int
    """Connections sending at the same time (default `DEFAULT_CONCURRENCY`)."""
    verify: Verify | str
    """How to check that accepted spans were stored (default `Verify.NONE`)."""
    timeout: float
    """Seconds per request (default 30)."""
    settle_timeout: float
    """With `Verify.FAULTFINDER`: give up once the stored count has not grown for this
    long (default 30 s)."""
    max_retries: int
    """Retries of a throttled request before its spans count as rejected (default 20)."""
    headers: Mapping[str, str] | None
    """Extra headers of every request."""
    server_pid: int | None
    """The server's process, whose memory is sampled (same machine only)."""
    rate: float | None
    """Offered load in spans/s: request i is due `i * batch / rate` s after the start,
    whether or not earlier ones were answered (open loop), and its latency counts from
    when it was due, so time spent waiting for a free connection is counted too. None
    (default): each connection sends its next request when the last one is answered."""


def rejected_spans(response: httpx.Response) -> int:
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


@dataclass
class _Run:
    """Shared state of the senders of one benchmark run."""

    client: httpx.AsyncClient
    url: str
    requests: Sequence[PreparedRequest]
    report: IngestReport
    max_retries: int
    progress: Progress | None
    task: TaskID | None
    latencies: list[float] = field(default_factory=list)
    next_index: int = 0
    due: list[float] | None = None
    """With an offered rate: when each request is due (perf_counter)."""

    def _note_error(self, message: str) -> None:
        if len(self.report.errors) < 5 and message not in self.report.errors:
            self.report.errors.append(message)

    async def sender(self) -> None:
        while self.next_index < len(self.requests):
            prepared = self.requests[self.next_index]
            self.next_index += 1
            await self._send(prepared)
            self._advance(prepared)

    async def paced(self) -> None:
        """Send each request when it is due (`due`), however many are still unanswered:
        the pool's connections bound what is on the wire, the rest wait for one."""
        assert self.due is not None
        tasks: set[asyncio.Task[None]] = set()

        async def one(prepared: PreparedRequest, due: float) -> None:
            await self._send(prepared, due=due)
            self._advance(prepared)

        for prepared, due in zip(self.requests, self.due, strict=True):
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(prepared, due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)

    def _advance(self, prepared: PreparedRequest) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(
                self.task, advance=prepared.spans, accepted=self.report.spans_accepted
            )

    async def _send(self, prepared: PreparedRequest, *, due: float | None = None) -> None:
        report = self.report
        throttled = transport_failures = 0
        while True:
            started = time.perf_counter() if due is None else due
            due = None  # a retry's latency counts from when it was sent
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
                rejected = min(rejected_spans(response), prepared.spans)
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


async def run_ingest(
    to: str,
    requests: Sequence[PreparedRequest],
    *,
    progress: Progress | None = None,
    **send: Unpack[SendOptions],
) -> IngestReport:
    """POST `requests` to `to`'s OTLP/HTTP endpoint over `concurrency` connections and measure."""
    if not requests:
        raise ValueError("no requests to send")
    verify = Verify(send.get("verify", Verify.NONE))
    concurrency = send.get("concurrency", DEFAULT_CONCURRENCY)
    server_pid = send.get("server_pid")
    url = traces_url(to)
    base = url.removesuffix("/v1/traces")
    report = _empty_report(url, requests, concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(send.get("timeout", 30.0)),
        limits=limits,
        headers=dict(send.get("headers") or {}),
    ) as client:
        baseline: int | None = None
        stages_before: dict[str, Histogram] = {}
        if verify is Verify.FAULTFINDER:
            outcome = await stored_spans(client, base + STATS_INGEST_PATH)
            if isinstance(outcome, int):
                baseline = outcome
                stages_before = await server_histograms(client, base + METRICS_PATH)
            else:
                report.durability_note = outcome

        stop_sampling = asyncio.Event()
        sampler = (
            asyncio.create_task(sample_server_memory(server_pid, report, stop_sampling))
            if server_pid is not None
            else None
        )
        task = None
        if progress is not None:
            task = progress.add_task("sending", total=report.spans_requested, accepted=0)
        run = _Run(client, url, requests, report, send.get("max_retries", 20), progress, task)
        rate = send.get("rate")
        started = time.perf_counter()
        if rate is None:
            await asyncio.gather(*(run.sender() for _ in range(max(1, concurrency))))
        else:
            report.offered_spans_per_s = rate
            sent = 0
            run.due = []
            for prepared in requests:
                run.due.append(started + sent / rate)
                sent += prepared.spans
            await run.paced()
        report.send_seconds = time.perf_counter() - started
        if report.send_seconds > 0:
            report.accepted_spans_per_s = report.spans_accepted / report.send_seconds
        report.latency_p50_ms = percentile(run.latencies, 0.50) * 1000
        report.latency_p99_ms = percentile(run.latencies, 0.99) * 1000

        if baseline is not None:
            await await_durability(
                client,
                base + STATS_INGEST_PATH,
                report,
                baseline,
                started,
                send.get("settle_timeout", 30.0),
                progress,
            )
            if stages_before:
                await _note_server_stages(client, base + METRICS_PATH, report, stages_before)
        stop_sampling.set()
        if sampler is not None:
            await sampler

    report.client_peak_rss_mb = client_peak_rss_mb()
    if server_pid is not None:
        _note_server_peak(report, server_pid)
    return report


def _note_server_peak(report: IngestReport, server_pid: int) -> None:
    hwm = process_memory_kb(server_pid).get("VmHWM")
    report.server_peak_rss_mb = hwm / 1024 if hwm is not None else None
    if hwm is None and report.server_sampled_peak_rss_mb is None:
        report.errors.append(f"/proc/{server_pid}/status is not readable")


def _empty_report(url: str, requests: Sequence[PreparedRequest], concurrency: int) -> IngestReport:
    first = requests[0]
    raw = sum(r.raw_size for r in requests)
    spans = sum(r.spans for r in requests)
    return IngestReport(
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


async def _note_server_stages(
    client: httpx.AsyncClient,
    metrics_url: str,
    report: IngestReport,
    before: Mapping[str, Histogram],
) -> None:
    after = await server_histograms(client, metrics_url)
    report.server_stages = {
        stage: stage_times(before.get(name), after[name])
        for stage, name in SERVER_STAGES
        if name in after
    }
    commits = report.server_stages.get("commit")
    if commits is not None and report.durable_after_s:
        report.writer_busy = commits.total_s / report.durable_after_s


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
    batch: int = 100,
    body_format: BodyFormat | str = BodyFormat.PROTOBUF,
    gzip: bool = False,
    project: str | None = None,
    progress: bool = True,
    **send: Unpack[SendOptions],
) -> IngestReport:
    """Build `spans` spans of agent runs, encode them, then send and measure (`send` are
    `run_ingest`'s options)."""
    if spans < 1:
        raise ValueError(f"spans must be at least 1, got {spans}")
    concurrency = send.get("concurrency", DEFAULT_CONCURRENCY)
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    rate = send.get("rate")
    if rate is not None and rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
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
        return asyncio.run(run_ingest(to, requests, progress=bar if progress else None, **send))
