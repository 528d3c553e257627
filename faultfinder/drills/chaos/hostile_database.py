"""Hostile drills 2 and 7 (issue 28): a database that takes no writes (opened read-only,
PostgreSQL in read-only mode, a full disk) must get 503 + Retry-After and a failing
`/readyz`, never an acknowledgement of spans it did not store; a retrying sender's spans
must all land once it takes writes again."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.engine import make_url

from faultfinder.drills.chaos.hostile_bodies import partial_success
from faultfinder.drills.chaos.hostile_context import DrillContext, Finding, postgres_admin
from faultfinder.drills.chaos.sending import SendTally, send_until_acknowledged
from faultfinder.drills.chaos.stored_state import read_stored_state
from faultfinder.drills.chaos.traffic import ChaosTraffic, SpanKey
from faultfinder.evaluation.sidecar import SidecarProcess, faultfinder_command

__all__ = ["RetryingSender", "full_disk_drill", "read_only_drill"]


@dataclass(frozen=True)
class _Answer:
    at: float
    status: int
    seconds: float
    retry_after: bool
    rejected: int
    """Spans a 200 refused as partial success (acknowledged, never stored)."""


@dataclass
class RetryingSender:
    """`requests` small runs sent from a thread the way an OTLP exporter with unbounded
    retries sends them (`send_until_acknowledged`), every answer recorded."""

    url: str
    requests: int
    concurrency: int = 2
    tally: SendTally = field(default_factory=SendTally)
    answers: list[_Answer] = field(default_factory=list)
    offered: set[SpanKey] = field(default_factory=set)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._send(),), name="retrying-sender", daemon=True
        )
        self._thread.start()

    def join(self, timeout: float) -> bool:
        """Wait until every request is acknowledged (or given up); False on timeout."""
        assert self._thread is not None
        self._thread.join(timeout)
        return not self._thread.is_alive()

    async def _send(self) -> None:
        traffic = ChaosTraffic(steps_per_run=5, failed_interval_s=None)
        waiting = [traffic.next_request() for _ in range(self.requests)]
        for request in waiting:
            self.offered.update(request.spans)

        async def before(request: httpx.Request) -> None:
            request.extensions["hostile_started"] = time.monotonic()

        async def after(response: httpx.Response) -> None:
            started = response.request.extensions.get("hostile_started", time.monotonic())
            rejected = 0
            if response.status_code == 200:
                await response.aread()
                rejected = partial_success(response.content)[0]
            self.answers.append(
                _Answer(
                    time.monotonic(),
                    response.status_code,
                    time.monotonic() - started,
                    "retry-after" in response.headers,
                    rejected,
                )
            )

        hooks: dict[str, list[Callable[..., Any]]] = {"request": [before], "response": [after]}
        async with httpx.AsyncClient(timeout=120, event_hooks=hooks) as client:

            async def sender() -> None:
                while waiting:
                    await send_until_acknowledged(
                        client,
                        f"{self.url}/v1/traces",
                        waiting.pop(0),
                        self.tally,
                        max_refusals=100_000,
                        max_down_s=180,
                        retry_in_flight=True,
                    )

            await asyncio.gather(*(sender() for _ in range(self.concurrency)))


def _upgrade(database_url: str) -> None:
    subprocess.run(
        [*faultfinder_command(), "db", "upgrade", "--database-url", database_url],
        check=True,
        capture_output=True,
    )


def _readyz(url: str) -> tuple[int, str]:
    try:
        answer = httpx.get(f"{url}/readyz", timeout=10)
    except httpx.HTTPError as error:
        return 0, type(error).__name__
    details = answer.json().get("details", {}) if answer.content else {}
    return answer.status_code, str(details.get("ingest") or details.get("database") or "")[:120]


@dataclass
class _Outage:
    """What the sender and /readyz saw while the database took no writes."""

    ready: Counter[int] = field(default_factory=Counter)
    ready_detail: str = ""
    ended: float = 0.0

    def watch(self, url: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            status, detail = _readyz(url)
            self.ready[status] += 1
            if status == 503 and not self.ready_detail:
                self.ready_detail = detail
            time.sleep(0.5)
        self.ended = time.monotonic()


def _outage_figures(
    finding: Finding, probe: str, sender: RetryingSender, outage: _Outage, sent_at: float
) -> None:
    during = [answer for answer in sender.answers if answer.at <= outage.ended]
    refused = [answer for answer in during if answer.status == 503]
    latencies = sorted(answer.seconds for answer in refused)
    first = min(refused, key=lambda answer: answer.at) if refused else None
    finding.add(
        probe,
        answers=dict(Counter(answer.status for answer in during)),
        answers_503_with_retry_after=sum(answer.retry_after for answer in refused),
        first_503_after_s=round(first.at - sent_at, 2) if first else None,
        slowest_503_s=round(latencies[-1], 2) if latencies else None,
        median_503_s=round(latencies[len(latencies) // 2], 3) if latencies else None,
        spans_refused_in_a_200=sum(answer.rejected for answer in during),
        readyz=dict(outage.ready),
        readyz_says=outage.ready_detail,
    )
    finding.check(f"{probe}: ingest answered 503", bool(refused))
    finding.check(
        f"{probe}: every answer 503 with Retry-After",
        all(answer.status == 503 and answer.retry_after for answer in during),
    )
    finding.check(f"{probe}: /readyz 503", outage.ready.get(503, 0) > 0)


def _landing_figures(
    finding: Finding, sender: RetryingSender, database_url: str, finished: bool, since: float
) -> None:
    stored = asyncio.run(read_stored_state(database_url)).spans
    acknowledged = sender.tally.acknowledged
    lost = len(acknowledged - stored) + sum(answer.rejected for answer in sender.answers)
    finding.add(
        "retrying sender",
        spans_sent=len(sender.offered),
        spans_acknowledged=len(acknowledged),
        spans_stored=len(sender.offered & stored),
        spans_lost=lost,
        spans_given_up=len(sender.tally.given_up),
        all_landed_after_s=round(time.monotonic() - since, 1) if finished else None,
        statuses=dict(sender.tally.statuses),
    )
    finding.check("spans lost (acknowledged, not stored): 0", lost == 0)
    finding.check(
        "every span of the retrying sender landed once writes were possible",
        finished and sender.offered <= stored,
    )


def read_only_drill(ctx: DrillContext, finding: Finding) -> None:
    """Item 2 (and item 7's /readyz): a sidecar on a read-only database with a retrying
    sender, then restarted on the same database made writable."""
    scale = ctx.scale
    env = {"FAULTFINDER_INGEST_ACK_TIMEOUT": f"{scale.ack_timeout:g}"} if scale.ack_timeout else {}
    with ctx.database("readonly") as url:
        _upgrade(url)
        if ctx.dialect == "sqlite":
            read_only = f"sqlite+aiosqlite:///file:{make_url(url).database}?mode=ro&uri=true"
            how = "SQLite opened with mode=ro"
        else:
            name = make_url(url).database
            # From the server's other database: the read-only one cannot be altered back.
            postgres_admin(
                ctx.database_url, f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'
            )
            read_only = url
            how = "ALTER DATABASE … SET default_transaction_read_only = on"
        finding.notes.append(f"read-only: {how}")
        sidecar = SidecarProcess(read_only, ctx.workdir, env=env)
        restart = SidecarProcess(url, ctx.workdir, env=env, port=sidecar.port)
        try:
            sidecar.start()
            readyz_before, _ = _readyz(sidecar.url)
            finding.add("read-only database", readyz_before_any_write=readyz_before)
            sender = RetryingSender(sidecar.url, scale.retrying_requests)
            sent_at = time.monotonic()
            sender.start()
            outage = _Outage()
            watch_s = (scale.ack_timeout or 30.0) + 5
            ctx.say(f"sending to the read-only database for {watch_s:g} s")
            outage.watch(sidecar.url, watch_s)
            ctx.say("restarting the sidecar on the database made writable")
            sidecar.stop()
            if ctx.dialect != "sqlite":
                postgres_admin(
                    ctx.database_url,
                    f'ALTER DATABASE "{name}" SET default_transaction_read_only = off',
                )
            restarted_at = time.monotonic()
            restart_s = restart.start()
            finished = sender.join(180)
        finally:
            sidecar.stop()
            restart.stop()
        _outage_figures(finding, "read-only database", sender, outage, sent_at)
        finding.add("restart on the writable database", seconds_to_ready=round(restart_s, 1))
        _landing_figures(finding, sender, url, finished, restarted_at)


@contextlib.contextmanager
def _small_tmpfs(folder: Path, size: str) -> Iterator[str | None]:
    """A tmpfs of `size` mounted on `folder` (yields None), or why it cannot be mounted."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        yield (mounted.stderr or mounted.stdout or f"mount exited {mounted.returncode}").strip()
        return
    try:
        yield None
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def _fill(path: Path) -> int:
    """Write `path` until the file system is full; the bytes written."""
    written = 0
    with path.open("wb", buffering=0) as handle:
        for size in (1 << 20, 1 << 12, 1):
            block = b"\x00" * size
            while True:
                try:
                    handle.write(block)
                except OSError:
                    break
                written += size
    return written


def full_disk_drill(ctx: DrillContext, finding: Finding) -> None:
    """Item 7: the SQLite file on a small tmpfs that is then filled; a retrying sender
    meanwhile; then the space is freed and the sender's spans must land."""
    scale = ctx.scale
    env = {"FAULTFINDER_INGEST_ACK_TIMEOUT": f"{scale.ack_timeout:g}"} if scale.ack_timeout else {}
    with _small_tmpfs(ctx.workdir / "tmpfs", "16m") as why_not:
        if why_not is not None:
            finding.skipped = f"cannot mount a 16 MB tmpfs for the full disk: {why_not}"
            return
        url = f"sqlite+aiosqlite:///{ctx.workdir / 'tmpfs' / 'full.db'}"
        _upgrade(url)
        filler = ctx.workdir / "tmpfs" / "filler"
        with ctx.sidecar(url, env) as sidecar:
            warm = RetryingSender(sidecar.url, 1)
            warm.start()
            warm.join(60)
            filled = _fill(filler)
            ctx.say(f"disk full ({filled / 1e6:.1f} MB of filler); sending")
            sender = RetryingSender(sidecar.url, scale.retrying_requests)
            sent_at = time.monotonic()
            sender.start()
            outage = _Outage()
            outage.watch(sidecar.url, (scale.ack_timeout or 30.0) + 5)
            filler.unlink()
            freed_at = time.monotonic()
            ctx.say("space freed; waiting for the retrying sender")
            finished = sender.join(180)
            readyz_after, _ = _readyz(sidecar.url)
        _outage_figures(finding, "full disk (16 MB tmpfs)", sender, outage, sent_at)
        finding.add("space freed", readyz=readyz_after)
        finding.check("space freed: /readyz 200", readyz_after == 200)
        _landing_figures(finding, sender, url, finished, freed_at)
