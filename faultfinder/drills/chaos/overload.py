"""Overload: offer a sidecar a multiple of its measured capacity and check that it sheds
load with 503 + Retry-After, keeps answering queries, recovers and loses no span."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING

import httpx
from opentelemetry.sdk.trace import ReadableSpan

from faultfinder.drills.chaos.sending import (
    SendTally,
    aiohttp_session,
    send_until_acknowledged_aiohttp,
)
from faultfinder.drills.chaos.stored_state import read_stored_state
from faultfinder.drills.chaos.traffic import ChaosRequest, ChaosTraffic, SpanKey, span_keys
from faultfinder.drills.ingest import STATS_INGEST_PATH, process_memory_kb
from faultfinder.drills.ingest.report import percentile
from faultfinder.evaluation.replay.otlp_http import PROTOBUF_CONTENT_TYPE

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "OverloadDrill",
    "OverloadOutcome",
    "OverloadReport",
    "measure_capacity",
    "measure_capacity_async",
    "run_overload",
]


@dataclass
class OverloadReport:
    """Figures of driving one sidecar past its capacity."""

    capacity_spans_per_s: float
    factor: float
    duration_s: float
    offered_spans_per_s: float = 0.0
    """Distinct spans offered per second during the overload (first attempts only)."""
    target_spans_per_s: float = 0.0
    """`factor` × capacity: what `offered_spans_per_s` should reach. Less means the load
    generator could not keep up, and the sidecar was not offered the multiple."""
    pacing_lag_s: float = 0.0
    """How far behind its schedule the load generator was when the overload ended."""
    load_cpu_share: float | None = None
    """CPU seconds the load generator's process used per second of overload (1.0: one core
    busy), retries, query prober and SDK exporter included."""
    sent_spans_per_s: float = 0.0
    """Distinct spans per second whose first attempt went out on a connection during the
    overload: what the sidecar was really offered. Below `offered_spans_per_s` when the
    `max_in_flight` connections were all busy and requests waited for one in the generator."""
    first_send_wait_p50_ms: float = 0.0
    first_send_wait_max_ms: float = 0.0
    """From a request's turn in the schedule to its first attempt going out."""
    peak_requests_in_flight: int = 0
    """Most requests offered and not yet acknowledged at once (on a connection, waiting for
    one, or waiting to retry)."""
    spans_offered: int = 0
    spans_acknowledged: int = 0
    spans_stored: int = 0
    """Growth of the stored-span count from the start of the overload."""
    acknowledged_but_missing: int | None = None
    """Acknowledged spans not in the database (checked span by span when the database
    is known, else by counts): must be 0."""
    spans_given_up: int = 0
    """Spans the retrying senders gave up on: must be 0."""
    responses: dict[int, int] = field(default_factory=dict)
    throttled_without_retry_after: int = 0
    server_refusals: dict[str, int] = field(default_factory=dict)
    """The server's count of refused requests by reason (`requests_rejected` of
    /api/stats/ingest): `saturated` = queue full, `inflight` = too many bytes arriving."""
    transport_errors: int = 0
    exporter_batches: int = 0
    exporter_spans_acknowledged: int = 0
    exporter_failures: int = 0
    """OpenTelemetry SDK `OTLPSpanExporter.export` calls that gave up (it tries 6 times)."""
    queries: int = 0
    query_failures: int = 0
    """GET /api/runs during the overload that did not answer 200."""
    query_p50_ms: float = 0.0
    query_p99_ms: float = 0.0
    query_max_ms: float = 0.0
    baseline_rss_mb: float | None = None
    peak_rss_mb: float | None = None
    """The server's VmHWM after the run."""
    rss_samples_mb: list[float] = field(default_factory=list)
    """The server's VmRSS every `rss_interval_s` from the start of the overload until it
    recovered: a bounded server levels off, a leaking one keeps climbing."""
    rss_interval_s: float = 5.0
    recovery_s: float | None = None
    """Seconds from the end of the overload until every retry was acknowledged."""
    recovered: bool = False
    """After the overload: queue empty, a new request acknowledged at the first attempt."""
    server_alive: bool = True
    server_cpus: list[int] | None = None
    """The cores the sidecar was pinned to (`--pin`); None: not pinned."""
    load_cpus: list[int] | None = None
    """The cores the load generator was pinned to; None: not pinned."""
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.server_alive
            and self.recovered
            and self.acknowledged_but_missing == 0
            and self.spans_given_up == 0
            and self.query_failures == 0
            and self.throttled_without_retry_after == 0
            and not any(status >= 500 and status != 503 for status in self.responses)
        )


@dataclass(frozen=True)
class OverloadDrill:
    """How hard and how long one overload run pushes."""

    factor: float = 2.0
    """Offered load as a multiple of the capacity."""
    duration: float = 10.0
    """Seconds of overload."""
    capacity: float | None = None
    """Acknowledged spans per second the sidecar manages (default: measured first)."""
    capacity_seconds: float = 5.0
    """Seconds spent measuring the capacity."""
    runs_per_request: int = 4
    sdk_batches: int = 10
    """Batches the OpenTelemetry SDK exporter sends alongside the retrying senders."""
    max_in_flight: int = 1024
    """Connections the retrying senders may hold open. Enough for the requests of 2x a
    sidecar's capacity to reach it on the defaults (256 x 64-span requests never filled
    the 50,000-span queue: the surplus waited in the generator, and the sidecar was
    offered 0.84x)."""


@dataclass
class OverloadOutcome:
    report: OverloadReport
    acknowledged: set[SpanKey]
    """Every span acknowledged, by the retrying senders and by the SDK exporter."""
    offered: set[SpanKey]
    """The spans the retrying senders offered (each retried until acknowledged)."""
    exporter_offered: set[SpanKey]


async def _stored_spans(client: httpx.AsyncClient, url: str) -> int:
    response = await client.get(url + STATS_INGEST_PATH, timeout=30)
    response.raise_for_status()
    return int(response.json()["spans_stored"])


async def measure_capacity_async(
    url: str,
    traffic: ChaosTraffic,
    *,
    seconds: float = 5.0,
    concurrency: int = 8,
    session: aiohttp.ClientSession | None = None,
) -> float:
    """Acknowledged (hence durable) spans per second with `concurrency` closed-loop senders.

    They send over `session` (default: a session of their own), the client the overload's
    senders use, so that the capacity and the multiple offered are measured alike.
    """
    tally = SendTally()
    async with contextlib.AsyncExitStack() as stack:
        if session is None:
            session = await stack.enter_async_context(aiohttp_session(concurrency))
        client = session
        deadline = time.monotonic() + seconds

        async def sender() -> None:
            while time.monotonic() < deadline:
                await send_until_acknowledged_aiohttp(
                    client, f"{url}/v1/traces", traffic.next_request(), tally, retry_in_flight=True
                )

        started = time.monotonic()
        await asyncio.gather(*(sender() for _ in range(concurrency)))
        elapsed = time.monotonic() - started
    return len(tally.acknowledged) / elapsed


def measure_capacity(
    url: str, traffic: ChaosTraffic, *, seconds: float = 5.0, concurrency: int = 8
) -> float:
    """`measure_capacity_async` from synchronous code."""
    return asyncio.run(
        measure_capacity_async(url, traffic, seconds=seconds, concurrency=concurrency)
    )


def _export_with_sdk(url: str, batches: Sequence[Sequence[ReadableSpan]]) -> list[bool]:
    """Export batches with the OpenTelemetry SDK's OTLP/HTTP exporter (its own retries)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", timeout=120)
    try:
        return [exporter.export(batch) is SpanExportResult.SUCCESS for batch in batches]
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]


@dataclass
class _FirstSends:
    """When the first attempt of each offered request went out on a connection, seen
    through the session's trace hooks (`send_until_acknowledged_aiohttp` names the request
    of each attempt)."""

    scheduled: dict[int, tuple[ChaosRequest, float]] = field(default_factory=dict)
    """Requests offered and not sent yet, by `id()`, with their turn in the schedule."""
    waits: list[float] = field(default_factory=list)
    spans_sent_by: list[tuple[float, int]] = field(default_factory=list)
    """(when, spans) of each first attempt sent."""

    def trace_config(self) -> aiohttp.TraceConfig:
        import aiohttp

        config = aiohttp.TraceConfig()
        config.on_request_headers_sent.append(self._sent)
        return config

    def offer(self, request: ChaosRequest, turn: float) -> None:
        self.scheduled[id(request)] = (request, turn)

    async def _sent(
        self,
        session: aiohttp.ClientSession,
        context: SimpleNamespace,
        params: aiohttp.TraceRequestHeadersSentParams,
    ) -> None:
        first = self.scheduled.pop(id(context.trace_request_ctx), None)
        if first is not None:
            now = time.monotonic()
            self.waits.append(now - first[1])
            self.spans_sent_by.append((now, len(first[0].spans)))

    def spans_sent_before(self, moment: float) -> int:
        return sum(spans for when, spans in self.spans_sent_by if when <= moment)


@dataclass
class _Overload:
    """One overload run against the sidecar at `url`: the paced senders, the SDK exporter,
    the query prober and the memory sampler, and what they saw."""

    url: str
    traffic: ChaosTraffic
    report: OverloadReport
    sdk_batches: Sequence[Sequence[ReadableSpan]]
    max_in_flight: int
    server_pid: int | None = None
    first_sends: _FirstSends = field(default_factory=_FirstSends)
    tally: SendTally = field(default_factory=SendTally)
    offered: set[SpanKey] = field(default_factory=set)
    exporter_offered: set[SpanKey] = field(default_factory=set)
    latencies: list[float] = field(default_factory=list)

    async def run(self, session: aiohttp.ClientSession) -> None:
        """Overload the sidecar, sending over `session` (which holds at most
        `max_in_flight` connections)."""
        url, report = self.url, self.report
        # Expire idle connections long before the server's keep-alive timeout, so that a
        # failed probe means the server failed, not a race over a closing connection.
        async with httpx.AsyncClient(
            timeout=30, limits=httpx.Limits(keepalive_expiry=1.0)
        ) as query_client:
            baseline = await _stored_spans(query_client, url)
            stop_queries = asyncio.Event()
            sampler = (
                asyncio.create_task(self._sample_rss(self.server_pid)) if self.server_pid else None
            )
            prober = asyncio.create_task(self._probe_queries(query_client, stop_queries))
            exporting = asyncio.create_task(
                asyncio.to_thread(_export_with_sdk, url, self.sdk_batches)
            )
            in_flight, sending_ended = await self._offer(session)
            if in_flight:
                await asyncio.gather(*in_flight)
            results = await exporting
            report.recovery_s = time.monotonic() - sending_ended
            stop_queries.set()
            await prober
            self._count_exported(results)
            await self._check_recovered(session, query_client, baseline)
            if sampler is not None:
                sampler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampler
            if self.first_sends.waits:
                report.first_send_wait_p50_ms = percentile(self.first_sends.waits, 0.50) * 1000
                report.first_send_wait_max_ms = max(self.first_sends.waits) * 1000
            if self.latencies:
                report.query_p50_ms = percentile(self.latencies, 0.50) * 1000
                report.query_p99_ms = percentile(self.latencies, 0.99) * 1000
                report.query_max_ms = max(self.latencies) * 1000

    async def _offer(self, session: aiohttp.ClientSession) -> tuple[set[asyncio.Task[bool]], float]:
        """Send at `factor` × capacity for `duration` seconds, each request retried until
        acknowledged; returns the requests still in flight and when sending ended.

        Each request is a task of its own, so that a request waiting to retry holds up none
        of the others, as with many exporters. The cost of a task stays the same however
        many wait: the session hands a freed connection to the longest waiting request
        without looking at the others, and the pacing looks at none of them. Requests are
        prepared before their turn, so that what is offered follows the schedule.
        """
        report = self.report
        in_flight: set[asyncio.Task[bool]] = set()
        rate = report.capacity_spans_per_s * report.factor
        report.target_spans_per_s = rate
        url = f"{self.url}/v1/traces"
        cpu_started = time.process_time()
        started = time.monotonic()
        next_send = started
        first_attempts = 0
        request = self.traffic.next_request()
        while next_send - started < report.duration_s:
            await asyncio.sleep(max(0.0, next_send - time.monotonic()))
            self.offered.update(request.spans)
            first_attempts += len(request.spans)
            self.first_sends.offer(request, next_send)
            task = asyncio.create_task(
                send_until_acknowledged_aiohttp(
                    session, url, request, self.tally, retry_in_flight=True
                )
            )
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            report.peak_requests_in_flight = max(report.peak_requests_in_flight, len(in_flight))
            next_send += len(request.spans) / rate
            request = self.traffic.next_request()
        sending_ended = time.monotonic()
        report.pacing_lag_s = max(0.0, sending_ended - next_send)
        report.offered_spans_per_s = first_attempts / (sending_ended - started)
        report.load_cpu_share = (time.process_time() - cpu_started) / (sending_ended - started)
        first_sends = self.first_sends
        report.sent_spans_per_s = first_sends.spans_sent_before(sending_ended) / (
            sending_ended - started
        )
        return in_flight, sending_ended

    async def _probe_queries(self, client: httpx.AsyncClient, stop: asyncio.Event) -> None:
        report = self.report
        while not stop.is_set():
            started = time.perf_counter()
            try:
                answer = await client.get(f"{self.url}/api/runs", params={"limit": 5})
                if answer.status_code != 200:
                    report.query_failures += 1
                    self.tally.note(f"GET /api/runs → {answer.status_code}")
            except httpx.HTTPError as error:
                report.query_failures += 1
                self.tally.note(f"GET /api/runs failed: {type(error).__name__}: {error}")
            self.latencies.append(time.perf_counter() - started)
            report.queries += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.25)

    async def _sample_rss(self, pid: int) -> None:
        while True:
            rss = process_memory_kb(pid).get("VmRSS")
            if rss is not None:
                self.report.rss_samples_mb.append(round(rss / 1024, 1))
            await asyncio.sleep(self.report.rss_interval_s)

    def _count_exported(self, results: Sequence[bool]) -> None:
        self.report.exporter_batches = len(results)
        self.report.exporter_failures = results.count(False)
        for batch, ok in zip(self.sdk_batches, results, strict=True):
            self.exporter_offered.update(span_keys(batch))
            if ok:
                self.tally.acknowledged.update(span_keys(batch))
                self.report.exporter_spans_acknowledged += len(batch)

    async def _check_recovered(
        self, session: aiohttp.ClientSession, query_client: httpx.AsyncClient, baseline: int
    ) -> None:
        """Recovered: the queue drains and a fresh request goes through at the first attempt."""
        url, report = self.url, self.report
        drained = False
        deadline = time.monotonic() + 60
        while not drained and time.monotonic() < deadline:
            stats = (await query_client.get(url + STATS_INGEST_PATH)).json()
            drained = stats["queued_spans"] == 0
            report.server_refusals = dict(stats.get("requests_rejected") or {})
            if not drained:
                await asyncio.sleep(0.1)
        report.spans_stored = await _stored_spans(query_client, url) - baseline
        probe = self.traffic.next_request()
        async with session.post(
            f"{url}/v1/traces", data=probe.body, headers={"content-type": PROTOBUF_CONTENT_TYPE}
        ) as fresh:
            await fresh.read()
        report.recovered = drained and fresh.status == 200


async def _measure_and_overload(
    url: str, drill: OverloadDrill, server_pid: int | None
) -> _Overload:
    """Measure the capacity (unless the drill gives it), then overload: one session for
    both, so that the multiple is of what this very client gets through."""
    traffic = ChaosTraffic(
        runs_per_request=drill.runs_per_request, failed_interval_s=None, realistic=True
    )
    first_sends = _FirstSends()
    async with aiohttp_session(drill.max_in_flight, [first_sends.trace_config()]) as session:
        capacity = drill.capacity
        if capacity is None:
            capacity = await measure_capacity_async(
                url, traffic, seconds=drill.capacity_seconds, session=session
            )
        report = OverloadReport(
            capacity_spans_per_s=capacity, factor=drill.factor, duration_s=drill.duration
        )
        if server_pid is not None:
            rss = process_memory_kb(server_pid).get("VmRSS")
            report.baseline_rss_mb = rss / 1024 if rss is not None else None
        overload = _Overload(
            url,
            traffic,
            report,
            sdk_batches=[traffic.exporter_batch() for _ in range(drill.sdk_batches)],
            max_in_flight=drill.max_in_flight,
            server_pid=server_pid,
            first_sends=first_sends,
        )
        await overload.run(session)
    return overload


def run_overload(
    url: str,
    drill: OverloadDrill | None = None,
    *,
    server_pid: int | None = None,
    database_url: str | None = None,
) -> OverloadOutcome:
    """Offer `drill.factor` × capacity spans/s of realistic agent runs for `drill.duration`
    seconds to the sidecar at `url`, then wait until every request is acknowledged.

    The senders retry 429/503 after Retry-After (with jitter) until acknowledged, like an
    exporter with unbounded retries; an OpenTelemetry SDK exporter sends `drill.sdk_batches`
    batches meanwhile (it gives up after 6 tries: reported, not required to succeed);
    GET /api/runs is probed every 0.25 s. Capacity is measured first unless given. With
    `database_url`, acknowledged spans are checked against the database one by one.
    """
    drill = drill or OverloadDrill()
    overload = asyncio.run(_measure_and_overload(url, drill, server_pid))
    report, tally = overload.report, overload.tally
    report.spans_offered = len(overload.offered) + len(overload.exporter_offered)
    report.spans_acknowledged = len(tally.acknowledged)
    report.spans_given_up = len(tally.given_up)
    if database_url is not None:
        stored = asyncio.run(read_stored_state(database_url)).spans
        report.acknowledged_but_missing = len(tally.acknowledged - stored)
    else:
        report.acknowledged_but_missing = max(report.spans_acknowledged - report.spans_stored, 0)
    report.responses = dict(sorted(tally.statuses.items()))
    report.throttled_without_retry_after = tally.throttled_without_retry_after
    report.transport_errors = tally.transport_errors + tally.connection_refused
    report.errors = tally.errors
    if server_pid is not None:
        memory = process_memory_kb(server_pid)
        report.server_alive = bool(memory)
        hwm = memory.get("VmHWM")
        report.peak_rss_mb = hwm / 1024 if hwm is not None else None
    return OverloadOutcome(report, tally.acknowledged, overload.offered, overload.exporter_offered)
