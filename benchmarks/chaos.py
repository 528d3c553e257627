"""`faultfinder bench chaos`: SIGKILL a sidecar under sustained ingest and count what survived,
and drive ingest past its capacity to check that it sheds load without losing spans."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import httpx
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from rich.console import Console
from rich.progress import BarColumn, TaskID, TextColumn, TimeElapsedColumn
from sqlalchemy import text
from sqlalchemy.engine import make_url

from faultfinder import conventions as c
from faultfinder.benchmarks.ingest import STATS_INGEST_PATH, process_memory_kb
from faultfinder.benchmarks.otlp_traces import AgentTraceFactory, retry_after_seconds
from faultfinder.server.db.engine import create_engine
from faultfinder.server.progress import Progress

__all__ = [
    "ChaosRequest",
    "ChaosTraffic",
    "KillChaosOutcome",
    "KillReport",
    "OverloadOutcome",
    "OverloadReport",
    "SidecarProcess",
    "StoredState",
    "chaos_command",
    "measure_capacity",
    "read_stored_state",
    "run_fuzz_suite",
    "run_kill_chaos",
    "run_overload",
]

SpanKey = tuple[str, str]
"""(trace id, span id) in lower-case hex, as the span store keeps them."""

PROTOBUF = "application/x-protobuf"
_SCOPE = InstrumentationScope("faultfinder.benchmarks.chaos", "0.1.0")
_AGENTS = ("Planner", "Searcher", "Coder", "Checker")
_THROTTLED = frozenset({429, 503})
_REALISTIC_TEMPLATES = 8

FAST_LIFECYCLE = {
    "FAULTFINDER_QUIET_PERIOD": "0.5",
    "FAULTFINDER_SWEEP_INTERVAL": "0.25",
    # A killed process's job lease must run out soon for its job to resume quickly.
    "FAULTFINDER_JOB_LEASE": "3",
    "FAULTFINDER_JOB_MAX_ATTEMPTS": "20",
    "FAULTFINDER_JOB_BACKOFF": "0.2",
}
"""Settings that let a chaos run settle in seconds rather than minutes."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _faultfinder_command() -> list[str]:
    beside = Path(sys.executable).with_name("faultfinder")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("faultfinder")
    if found:
        return [found]
    return [sys.executable, "-c", "from faultfinder.cli import main; main()"]


class SidecarProcess:
    """A `faultfinder serve` process on a fixed loopback port that can be killed and restarted."""

    def __init__(
        self,
        database_url: str,
        log_dir: Path,
        *,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        ready_timeout: float = 120.0,
    ) -> None:
        self.database_url = database_url
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"sidecar-{self.port}.log"
        self._env = dict(env or {})
        self._ready_timeout = ready_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("the sidecar is not running")
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self) -> float:
        """Start the process and wait until /readyz answers; returns the seconds it took."""
        started = time.monotonic()
        environment = {**os.environ, "FAULTFINDER_DATABASE_URL": self.database_url, **self._env}
        with self.log_path.open("ab") as log_file:
            log_file.write(f"\n--- start {self.starts + 1} ---\n".encode())
            log_file.flush()
            self.process = subprocess.Popen(
                [*_faultfinder_command(), "serve", "--port", str(self.port), "--no-grpc"],
                env=environment,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        self.starts += 1
        deadline = started + self._ready_timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"sidecar exited with {self.process.returncode}; log {self.log_path}:\n"
                    + self.log()[-3000:]
                )
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return time.monotonic() - started
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"sidecar not ready after {self._ready_timeout:g} s")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, the writer's queue dies with the process."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        """SIGTERM (clean shutdown: the queue is drained), SIGKILL after 30 s."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> SidecarProcess:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# --- traffic --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChaosRequest:
    """One OTLP/HTTP protobuf body and the spans it carries."""

    body: bytes
    spans: tuple[SpanKey, ...]
    runs: int
    failed_runs: int


class ChaosTraffic:
    """Distinct small agent runs (a workflow root and one span per agent turn) as OTLP bodies,
    or with `realistic` the ≈20-span, ≈50 kB runs of `faultfinder bench ingest`.

    A run fails (its root and one tool step end in ERROR) at most every
    `failed_interval_s` seconds, so attribution work grows with time, not with ingest speed.
    """

    def __init__(
        self,
        *,
        steps_per_run: int = 5,
        runs_per_request: int = 1,
        failed_interval_s: float | None = 1.0,
        realistic: bool = False,
        seed: int | None = None,
    ) -> None:
        self._steps = steps_per_run
        self._realistic = realistic
        self._factory = AgentTraceFactory(seed=seed or 0)
        self._realistic_templates: list[ResourceSpans] = []
        self._runs_per_request = runs_per_request
        self._failed_interval = failed_interval_s
        self._last_failed = float("-inf")
        self._ids = random.Random(seed if seed is not None else os.urandom(16))
        self._resource = Resource.create({c.SERVICE_NAME: "faultfinder-chaos"})
        self._lock = threading.Lock()
        self._templates: dict[bool, ResourceSpans] = {}
        self.runs = 0

    def _context(self, trace_id: int) -> SpanContext:
        return SpanContext(
            trace_id=trace_id,
            span_id=self._ids.getrandbits(64) or 1,
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )

    def _span(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        attributes: dict[str, Any],
        start: int,
        end: int,
        status: Status | None = None,
    ) -> ReadableSpan:
        return ReadableSpan(
            name=name,
            context=context,
            parent=parent,
            resource=self._resource,
            attributes=attributes,
            kind=SpanKind.INTERNAL,
            status=status or Status(StatusCode.UNSET),
            start_time=start,
            end_time=end,
            instrumentation_scope=_SCOPE,
        )

    def run_spans(self, *, failed: bool) -> list[ReadableSpan]:
        """The spans of one new run, root last (the order an exporter sends them)."""
        with self._lock:
            self.runs += 1
            number = self.runs
            trace_id = self._ids.getrandbits(128) or 1
        root = self._context(trace_id)
        start = time.time_ns()
        spans: list[ReadableSpan] = []
        for index in range(self._steps):
            agent = _AGENTS[index % len(_AGENTS)]
            tool_fails = failed and index == self._steps // 2
            operation = c.OP_EXECUTE_TOOL if tool_fails else c.OP_INVOKE_AGENT
            content = (
                "Traceback: KeyError 'price' in the hotel list"
                if tool_fails
                else f"{agent} reports progress on run {number}, step {index}."
            )
            attributes: dict[str, Any] = {
                c.GEN_AI_OPERATION_NAME: operation,
                c.GEN_AI_AGENT_NAME: agent,
                c.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": content}]}]
                ),
            }
            if tool_fails:
                attributes[c.GEN_AI_TOOL_NAME] = "parse_hotels"
                attributes[c.GEN_AI_TOOL_CALL_RESULT] = content
            begin = start + (index + 1) * 1_000_000
            spans.append(
                self._span(
                    f"{operation} {agent}",
                    self._context(trace_id),
                    root,
                    attributes,
                    begin,
                    begin + 500_000,
                    Status(StatusCode.ERROR, "KeyError") if tool_fails else None,
                )
            )
        spans.append(
            self._span(
                f"{c.OP_INVOKE_WORKFLOW} chaos-run-{number}",
                root,
                None,
                {c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_WORKFLOW, c.RUN_TASK: f"chaos run {number}"},
                start,
                start + (self._steps + 2) * 1_000_000,
                Status(StatusCode.ERROR, "wrong answer") if failed else None,
            )
        )
        return spans

    def _next_is_failed(self) -> bool:
        if self._failed_interval is None:
            return False
        now = time.monotonic()
        with self._lock:
            if now - self._last_failed >= self._failed_interval:
                self._last_failed = now
                return True
        return False

    def exporter_batch(self) -> list[ReadableSpan]:
        """`runs_per_request` new runs as SDK spans, for an exporter to send."""
        return [
            span
            for _ in range(self._runs_per_request)
            for span in (self._factory.run() if self._realistic else self.run_spans(failed=False))
        ]

    def _template(self, *, failed: bool) -> ResourceSpans:
        # The SDK encodes a few runs once; requests copy them with fresh ids, which is ten
        # times cheaper than encoding anew and keeps the load generator off the CPU.
        if self._realistic and not failed:
            if len(self._realistic_templates) < _REALISTIC_TEMPLATES:
                request = encode_spans(self._factory.run())
                self._realistic_templates.append(request.resource_spans[0])
            return self._realistic_templates[self.runs % len(self._realistic_templates)]
        if failed not in self._templates:
            request = encode_spans(self.run_spans(failed=failed))
            self._templates[failed] = request.resource_spans[0]
        return self._templates[failed]

    def next_request(self) -> ChaosRequest:
        """A request of `runs_per_request` new runs (distinct trace and span ids)."""
        request = ExportTraceServiceRequest()
        keys: list[SpanKey] = []
        failed = 0
        for _ in range(self._runs_per_request):
            is_failed = self._next_is_failed()
            failed += is_failed
            resource_spans = request.resource_spans.add()
            resource_spans.CopyFrom(self._template(failed=is_failed))
            with self._lock:
                self.runs += 1
                trace_id = self._ids.getrandbits(128).to_bytes(16, "big")
                spans = [span for scope in resource_spans.scope_spans for span in scope.spans]
                new_ids = {
                    span.span_id: self._ids.getrandbits(64).to_bytes(8, "big") for span in spans
                }
            for span in spans:
                span.trace_id = trace_id
                if span.parent_span_id:
                    span.parent_span_id = new_ids[span.parent_span_id]
                span.span_id = new_ids[span.span_id]
                keys.append((trace_id.hex(), span.span_id.hex()))
        return ChaosRequest(
            request.SerializeToString(), tuple(keys), self._runs_per_request, failed
        )


# --- sending --------------------------------------------------------------------------------


@dataclass
class SendTally:
    """What the senders saw."""

    acknowledged: set[SpanKey] = field(default_factory=set)
    requests_acknowledged: int = 0
    interrupted: set[SpanKey] = field(default_factory=set)
    """Spans of requests sent but never answered (the process died holding them)."""
    requests_interrupted: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    throttled_without_retry_after: int = 0
    connection_refused: int = 0
    transport_errors: int = 0
    """Requests sent that got no answer (retried or counted as interrupted)."""
    given_up: set[SpanKey] = field(default_factory=set)
    """Spans of requests abandoned after too many refusals (never acknowledged)."""
    errors: list[str] = field(default_factory=list)

    def note(self, message: str) -> None:
        if len(self.errors) < 10 and message not in self.errors:
            self.errors.append(message)


async def send_until_acknowledged(
    client: httpx.AsyncClient,
    url: str,
    request: ChaosRequest,
    tally: SendTally,
    *,
    max_refusals: int = 200,
    max_down_s: float = 120.0,
    retry_in_flight: bool = False,
) -> bool:
    """POST until acknowledged, as an OTLP exporter would; True when acknowledged.

    Refused connections (the sidecar is down, for up to `max_down_s`) and 429/503 (up to
    `max_refusals`) are retried with the same body. A request that was sent but got no
    answer is counted as interrupted and, unless `retry_in_flight`, not sent again, so
    that its spans stay unacknowledged.
    """
    refusals = 0
    down_since: float | None = None
    while True:
        try:
            response = await client.post(
                url, content=request.body, headers={"content-type": PROTOBUF}
            )
        except httpx.ConnectError:
            tally.connection_refused += 1
            down_since = down_since or time.monotonic()
            if time.monotonic() - down_since > max_down_s:
                tally.note(f"the sidecar refused connections for {max_down_s:g} s")
                break
            await asyncio.sleep(0.05)
            continue
        except httpx.TransportError as error:
            tally.transport_errors += 1
            tally.note(f"{type(error).__name__}: {error}")
            if retry_in_flight:
                await asyncio.sleep(0.2)
                continue
            tally.requests_interrupted += 1
            tally.interrupted.update(request.spans)
            return False
        down_since = None
        tally.statuses[response.status_code] += 1
        if response.status_code == 200:
            tally.requests_acknowledged += 1
            tally.acknowledged.update(request.spans)
            return True
        if response.status_code in _THROTTLED and refusals < max_refusals:
            refusals += 1
            header = response.headers.get("retry-after")
            if header is None:
                tally.throttled_without_retry_after += 1
            # Jitter keeps refused senders from coming back in lockstep.
            delay = retry_after_seconds(header, default=1.0, cap=30.0)
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
            continue
        tally.note(f"HTTP {response.status_code}: {response.text[:200]}")
        break
    tally.given_up.update(request.spans)
    return False


# --- the stored state -----------------------------------------------------------------------


@dataclass
class StoredState:
    """What the database holds after a chaos run."""

    spans: set[SpanKey]
    runs_by_status: dict[str, int]
    jobs_by_status: dict[str, int]
    jobs_attempts: list[int]
    """`attempts` of every job."""
    failed_runs: set[str]
    """Runs that failed (status failed or attributed)."""
    attributions: Counter[tuple[str, str]]
    """(run id, method) → attributions stored."""
    jobs: Counter[tuple[str, str]]
    """(run id, attributor) → jobs."""


async def read_stored_state(database_url: str) -> StoredState:
    """Read spans, runs, jobs and attributions straight from the database."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            spans = {(row[0], row[1]) for row in await conn.execute(text(_SPANS_SQL))}
            runs = Counter(row[0] for row in await conn.execute(text("SELECT status FROM runs")))
            failed = {
                row[0]
                for row in await conn.execute(
                    text("SELECT id FROM runs WHERE status IN ('failed', 'attributed')")
                )
            }
            job_rows = (
                await conn.execute(text("SELECT run_id, attributor, status, attempts FROM jobs"))
            ).all()
            attributions = Counter(
                (row[0], row[1])
                for row in await conn.execute(text("SELECT run_id, method FROM attributions"))
            )
    finally:
        await engine.dispose()
    return StoredState(
        spans=spans,
        runs_by_status=dict(runs),
        jobs_by_status=dict(Counter(row[2] for row in job_rows)),
        jobs_attempts=[row[3] for row in job_rows],
        failed_runs=failed,
        attributions=attributions,
        jobs=Counter((row[0], row[1]) for row in job_rows if row[0] is not None),
    )


_SPANS_SQL = "SELECT trace_id, span_id FROM spans"


# --- kill chaos -----------------------------------------------------------------------------


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
    *,
    kills: int = 3,
    duration: float = 30.0,
    concurrency: int = 4,
    attributors: Sequence[str] = ("first_error",),
    env: Mapping[str, str] | None = None,
    aim_at_jobs_s: float = 0.0,
    failed_interval_s: float = 1.0,
    settle_timeout: float = 120.0,
    seed: int | None = None,
    progress: Callable[[float, int], None] | None = None,
) -> KillChaosOutcome:
    """Send distinct runs into a sidecar for `duration` seconds, SIGKILL it `kills` times at
    random moments (restarting it on the same database), then compare acknowledged spans
    with stored ones and attribution jobs enqueued with jobs finished.

    The database must be empty. With `aim_at_jobs_s`, each kill waits up to that long for a
    moment when an attribution job is running, so that kills interrupt jobs.
    """
    seed = seed if seed is not None else int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    report = KillReport(
        database=_redacted(database_url), kills=kills, duration_s=duration, seed=seed
    )
    tally = SendTally()
    environment = {
        **FAST_LIFECYCLE,
        "FAULTFINDER_ATTRIBUTORS": ",".join(attributors),
        "FAULTFINDER_WORKERS": "1",
        **(env or {}),
    }
    traffic = ChaosTraffic(failed_interval_s=failed_interval_s, seed=rng.getrandbits(64))
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
                concurrency=concurrency,
                rng=rng,
                aim_at_jobs_s=aim_at_jobs_s,
                progress=progress or (lambda _elapsed, _acked: None),
            )
        )
        settling = time.monotonic()
        report.settled, errors = asyncio.run(
            _await_settled(sidecar.url, attributors, settle_timeout)
        )
        report.settle_s = time.monotonic() - settling
        report.errors.extend(errors)
    finally:
        sidecar.stop()
    report.wall_s = time.monotonic() - started
    state = asyncio.run(read_stored_state(database_url))
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
    return KillChaosOutcome(report, tally.acknowledged, tally.interrupted)


def _redacted(database_url: str) -> str:
    return make_url(database_url).render_as_string(hide_password=True)


# --- overload -------------------------------------------------------------------------------


@dataclass
class OverloadReport:
    """Figures of driving one sidecar past its capacity."""

    capacity_spans_per_s: float
    factor: float
    duration_s: float
    offered_spans_per_s: float = 0.0
    """Distinct spans offered per second during the overload (first attempts only)."""
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
    url: str, traffic: ChaosTraffic, *, seconds: float = 5.0, concurrency: int = 8
) -> float:
    """Acknowledged (hence durable) spans per second with `concurrency` closed-loop senders."""
    tally = SendTally()
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client:

        async def sender() -> None:
            while time.monotonic() < deadline:
                await send_until_acknowledged(
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


def _span_keys(spans: Sequence[ReadableSpan]) -> set[SpanKey]:
    return {
        (f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}")
        for span in spans
        if span.context is not None
    }


async def _overload(
    url: str,
    traffic: ChaosTraffic,
    report: OverloadReport,
    tally: SendTally,
    offered: set[SpanKey],
    exporter_offered: set[SpanKey],
    *,
    sdk_batches: Sequence[Sequence[ReadableSpan]],
    max_in_flight: int,
    server_pid: int | None = None,
) -> None:
    limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=64)
    timeout = httpx.Timeout(120.0, pool=None)
    async with (
        httpx.AsyncClient(timeout=timeout, limits=limits) as client,
        # Expire idle connections before the server's 5 s keep-alive timeout, so that a
        # failed probe means the server failed, not a race over a closing connection.
        httpx.AsyncClient(timeout=30, limits=httpx.Limits(keepalive_expiry=1.0)) as query_client,
    ):
        baseline = await _stored_spans(query_client, url)
        stop_queries = asyncio.Event()
        latencies: list[float] = []

        async def query_prober() -> None:
            while not stop_queries.is_set():
                started = time.perf_counter()
                try:
                    answer = await query_client.get(f"{url}/api/runs", params={"limit": 5})
                    if answer.status_code != 200:
                        report.query_failures += 1
                        tally.note(f"GET /api/runs → {answer.status_code}")
                except httpx.HTTPError as error:
                    report.query_failures += 1
                    tally.note(f"GET /api/runs failed: {type(error).__name__}: {error}")
                latencies.append(time.perf_counter() - started)
                report.queries += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop_queries.wait(), 0.25)

        async def rss_sampler(pid: int) -> None:
            while True:
                rss = process_memory_kb(pid).get("VmRSS")
                if rss is not None:
                    report.rss_samples_mb.append(round(rss / 1024, 1))
                await asyncio.sleep(report.rss_interval_s)

        sampler = asyncio.create_task(rss_sampler(server_pid)) if server_pid else None
        prober = asyncio.create_task(query_prober())
        exporting = asyncio.create_task(asyncio.to_thread(_export_with_sdk, url, sdk_batches))
        in_flight: set[asyncio.Task[bool]] = set()
        rate = report.capacity_spans_per_s * report.factor
        started = time.monotonic()
        next_send = started
        first_attempts = 0
        while time.monotonic() - started < report.duration_s:
            request = traffic.next_request()
            next_send += len(request.spans) / rate
            await asyncio.sleep(max(0.0, next_send - time.monotonic()))
            offered.update(request.spans)
            first_attempts += len(request.spans)
            task = asyncio.create_task(
                send_until_acknowledged(
                    client, f"{url}/v1/traces", request, tally, retry_in_flight=True
                )
            )
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        sending_ended = time.monotonic()
        report.offered_spans_per_s = first_attempts / (sending_ended - started)
        if in_flight:
            await asyncio.gather(*in_flight)
        results = await exporting
        report.recovery_s = time.monotonic() - sending_ended
        stop_queries.set()
        await prober
        report.exporter_batches = len(results)
        report.exporter_failures = results.count(False)
        for batch, ok in zip(sdk_batches, results, strict=True):
            exporter_offered.update(_span_keys(batch))
            if ok:
                tally.acknowledged.update(_span_keys(batch))
                report.exporter_spans_acknowledged += len(batch)
        # Recovered: the queue drains and a fresh request goes through at the first attempt.
        drained = False
        deadline = time.monotonic() + 60
        while not drained and time.monotonic() < deadline:
            stats = (await query_client.get(url + STATS_INGEST_PATH)).json()
            drained = stats["queued_spans"] == 0
            report.server_refusals = dict(stats.get("requests_rejected") or {})
            if not drained:
                await asyncio.sleep(0.1)
        report.spans_stored = await _stored_spans(query_client, url) - baseline
        probe = traffic.next_request()
        fresh = await client.post(
            f"{url}/v1/traces", content=probe.body, headers={"content-type": PROTOBUF}
        )
        report.recovered = drained and fresh.status_code == 200
        if sampler is not None:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        ordered = sorted(latencies)
        if ordered:
            report.query_p50_ms = ordered[len(ordered) // 2] * 1000
            report.query_max_ms = ordered[-1] * 1000


def run_overload(
    url: str,
    *,
    server_pid: int | None = None,
    database_url: str | None = None,
    capacity: float | None = None,
    factor: float = 2.0,
    duration: float = 10.0,
    runs_per_request: int = 4,
    capacity_seconds: float = 5.0,
    sdk_batches: int = 10,
    max_in_flight: int = 256,
) -> OverloadOutcome:
    """Offer `factor` × capacity spans/s of realistic agent runs for `duration` seconds to
    the sidecar at `url`, then wait until every request is acknowledged.

    The senders retry 429/503 after Retry-After (with jitter) until acknowledged, like an
    exporter with unbounded retries; an OpenTelemetry SDK exporter sends `sdk_batches`
    batches meanwhile (it gives up after 6 tries: reported, not required to succeed);
    GET /api/runs is probed every 0.25 s. Capacity is measured first unless given. With
    `database_url`, acknowledged spans are checked against the database one by one.
    """
    traffic = ChaosTraffic(
        runs_per_request=runs_per_request, failed_interval_s=None, realistic=True
    )
    if capacity is None:
        capacity = measure_capacity(url, traffic, seconds=capacity_seconds)
    report = OverloadReport(capacity_spans_per_s=capacity, factor=factor, duration_s=duration)
    if server_pid is not None:
        rss = process_memory_kb(server_pid).get("VmRSS")
        report.baseline_rss_mb = rss / 1024 if rss is not None else None
    batches = [traffic.exporter_batch() for _ in range(sdk_batches)]
    tally = SendTally()
    offered: set[SpanKey] = set()
    exporter_offered: set[SpanKey] = set()
    asyncio.run(
        _overload(
            url,
            traffic,
            report,
            tally,
            offered,
            exporter_offered,
            sdk_batches=batches,
            max_in_flight=max_in_flight,
            server_pid=server_pid,
        )
    )
    report.spans_offered = len(offered) + len(exporter_offered)
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
    return OverloadOutcome(report, tally.acknowledged, offered, exporter_offered)


# --- the command ----------------------------------------------------------------------------


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
    help="Run the fuzz suite (tests/integration/test_fuzz.py) with this many cases per target.",
)
@click.option("--seed", type=int, default=None, help="Seed for the kill moments.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where logs and the default SQLite file go (default: a temporary directory).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def chaos_command(
    database_urls: tuple[str, ...],
    kills: int,
    duration: float,
    overload_factor: float | None,
    overload_duration: float,
    queue_spans: int | None,
    attributors: str,
    plugins: str | None,
    aim_at_jobs: float,
    fuzz: int | None,
    seed: int | None,
    workdir: Path | None,
    as_json: bool,
) -> None:
    """Kill the sidecar under load and overload it; count what was acknowledged and stored.

    --kills N: SIGKILL N times at random moments during --duration seconds of ingest,
    restarting on the same database; every acknowledged span must be stored and every
    attribution job finish exactly once. --overload F: offer F × the measured capacity;
    ingest must shed load with 503 + Retry-After, keep answering queries and lose nothing.
    --fuzz N: the hypothesis fuzz suite with N cases per target (needs a source checkout).
    """
    if not kills and overload_factor is None and fuzz is None:
        raise click.UsageError("nothing to do: give --kills N, --overload FACTOR or --fuzz N")
    console = Console(stderr=True)
    base = workdir or Path(tempfile.mkdtemp(prefix="faultfinder-chaos-"))
    base.mkdir(parents=True, exist_ok=True)
    names = [name.strip() for name in attributors.split(",") if name.strip()]
    env = {"FAULTFINDER_PLUGINS": plugins} if plugins else {}
    if queue_spans is not None:
        env["FAULTFINDER_INGEST_QUEUE_SPANS"] = str(queue_spans)
    urls = list(database_urls) or [f"sqlite+aiosqlite:///{base / 'chaos.db'}"]
    results: list[dict[str, Any]] = []
    ok = True
    for number, url in enumerate(urls):
        if kills:
            _require_empty(url)
            workdir_kills = base / f"kills-{number}"
            workdir_kills.mkdir(exist_ok=True)
            with Progress(
                TextColumn("[progress.description]{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[acked]} spans acknowledged"),
                TimeElapsedColumn(),
                console=console,
            ) as bar:
                task = bar.add_task(f"kill chaos on {_redacted(url)}", total=duration, acked=0)

                def advance(elapsed: float, acked: int, task: TaskID = task) -> None:
                    bar.update(task, completed=elapsed, acked=acked)

                outcome = run_kill_chaos(
                    url,
                    workdir_kills,
                    kills=kills,
                    duration=duration,
                    attributors=names,
                    env=env,
                    aim_at_jobs_s=aim_at_jobs,
                    seed=seed,
                    progress=advance,
                )
            results.append({"scenario": "kills", **dataclasses.asdict(outcome.report)})
            ok &= outcome.report.ok
            if not as_json:
                click.echo(f"== kill chaos ({_redacted(url)})")
                for line in _report_lines(outcome.report):
                    click.echo(line)
        if overload_factor is not None:
            workdir_overload = base / f"overload-{number}"
            workdir_overload.mkdir(exist_ok=True)
            with SidecarProcess(url, workdir_overload, env=env) as sidecar:
                console.print(f"overload: measuring capacity of {sidecar.url} …")
                report = run_overload(
                    sidecar.url,
                    server_pid=sidecar.pid,
                    database_url=url,
                    factor=overload_factor,
                    duration=overload_duration,
                ).report
            results.append({"scenario": "overload", **dataclasses.asdict(report)})
            ok &= report.ok
            if not as_json:
                click.echo(f"== overload ({_redacted(url)})")
                for line in _report_lines(report):
                    click.echo(line)
    if fuzz is not None:
        ok &= run_fuzz_suite(fuzz) == 0
    if as_json:
        click.echo(json.dumps(results, indent=2, default=str))
    if not ok:
        sys.exit(1)


FUZZ_SUITE = Path(__file__).resolve().parents[1] / "tests" / "integration" / "test_fuzz.py"


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
    async def count() -> int:
        engine = create_engine(database_url)
        try:
            async with engine.connect() as conn:
                return int((await conn.execute(text("SELECT count(*) FROM spans"))).scalar_one())
        except Exception:  # no schema yet: empty
            return 0
        finally:
            await engine.dispose()

    spans = asyncio.run(count())
    if spans:
        raise click.UsageError(
            f"--database-url {_redacted(database_url)} already holds {spans} spans; "
            "kill chaos counts everything it finds, so give it an empty database"
        )
