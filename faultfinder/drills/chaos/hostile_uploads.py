"""Hostile drills 3 and 4 (issue 28): uploads that never finish must not hold the
sidecar's memory, and a few slow senders must not stop everybody else's ingest."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from faultfinder.drills.chaos.hostile_context import MIB, DrillContext, Finding
from faultfinder.drills.chaos.hostile_probes import (
    PROTOBUF_HEADERS,
    MemoryWatch,
    RawUpload,
    Timed,
    timed,
)
from faultfinder.drills.chaos.traffic import ChaosTraffic

__all__ = ["chunked_drill", "slow_senders_drill"]


def _timeout_env(ctx: DrillContext, finding: Finding) -> dict[str, str]:
    seconds = ctx.scale.body_read_timeout
    finding.notes.append(
        f"run with FAULTFINDER_BODY_READ_TIMEOUT={seconds:g} s (the default is 30 s) to keep "
        "the drill short"
    )
    return {**ctx.scale.limits_env(), "FAULTFINDER_BODY_READ_TIMEOUT": f"{seconds:g}"}


def _normal_request(api: httpx.Client, traffic: ChaosTraffic) -> Timed:
    body = traffic.next_request().body
    return timed(lambda: api.post("/v1/traces", content=body, headers=PROTOBUF_HEADERS))


@dataclass
class _Upload:
    mib_sent: int
    status: int | None
    seconds: float


def chunked_drill(ctx: DrillContext, finding: Finding) -> None:
    """Item 3: `uploads` chunked uploads of `upload_mib` MiB each, none of them ever ended;
    the sidecar's memory during and after, and what each got."""
    scale = ctx.scale
    env = _timeout_env(ctx, finding)
    chunk = f"{MIB:x}\r\n".encode() + b"\x00" * MIB + b"\r\n"
    answer_within = scale.body_read_timeout + 30

    def upload(url: str) -> _Upload:
        started = time.monotonic()
        sending = RawUpload(url, "Transfer-Encoding: chunked\r\n", timeout=answer_within)
        try:
            sent = 0
            for _ in range(scale.upload_mib):
                if sending.answered() or not sending.send(chunk):
                    break
                sent += 1
            status = sending.status(answer_within)
            return _Upload(sent, status, time.monotonic() - started)
        finally:
            sending.close()

    traffic = ChaosTraffic(steps_per_run=3, failed_interval_s=None)
    limit_mb = scale.inflight_bytes / MIB
    with (
        ctx.database("chunked") as url,
        ctx.sidecar(url, env) as sidecar,
        MemoryWatch(sidecar.pid) as memory,
        httpx.Client(base_url=sidecar.url, timeout=120) as api,
    ):
        at_rest = memory.rss_mb() or 0.0
        finding.add("sidecar at rest", rss_mb=at_rest)
        after_rounds: list[float] = []
        for number in (1, 2):
            ctx.say(
                f"round {number}: {scale.uploads} unfinished chunked uploads of "
                f"{scale.upload_mib} MiB each"
            )
            with memory.phase() as phase, ThreadPoolExecutor(scale.uploads) as pool:
                futures = [pool.submit(upload, sidecar.url) for _ in range(scale.uploads)]
                time.sleep(2)
                during = _normal_request(api, traffic)
                uploads = [future.result() for future in futures]
            time.sleep(3)  # every connection is closed now: what stays
            after = memory.rss_mb() or 0.0
            after_rounds.append(after)
            statuses = Counter(upload.status for upload in uploads)
            probe = f"round {number}: {scale.uploads} chunked uploads × {scale.upload_mib} MiB"
            finding.add(
                probe,
                statuses={str(code): n for code, n in statuses.items()},
                mib_sent=sum(upload.mib_sent for upload in uploads),
                slowest_answer_s=round(max(upload.seconds for upload in uploads), 1),
                rss_peak_mb=phase.peak_mb,
                rss_after_close_mb=after,
                normal_export_during=during.status,
                normal_export_during_s=round(during.seconds, 3),
            )
            finding.check(
                f"round {number}: uploads past the in-flight limit refused with 503",
                statuses.get(503, 0) > 0,
            )
            finding.check(
                f"round {number}: every upload answered 408 or 503",
                set(statuses) <= {408, 503} and bool(statuses),
            )
            finding.check(
                f"round {number}: RSS peak under rest + {scale.rss_growth_limit_mb:g} MB",
                (phase.peak_mb or 0.0) - at_rest < scale.rss_growth_limit_mb,
            )
        later = _normal_request(api, traffic)
        finding.add(
            "after both rounds",
            server_refusals=api.get("/api/stats/ingest").json()["requests_rejected"],
            normal_export=later.status,
        )
    finding.notes.append(
        f"the body bytes held at once are capped at {limit_mb:g} MiB "
        "(FAULTFINDER_INGEST_INFLIGHT_BYTES); the rest of the peak is per connection"
    )
    finding.check(
        "memory does not grow from round to round (second round's RSS after close within "
        "50 MB of the first's)",
        after_rounds[1] - after_rounds[0] < 50,
    )
    finding.check("a normal export after the uploads: 200", later.status == 200)


def slow_senders_drill(ctx: DrillContext, finding: Finding) -> None:
    """Item 4: `slow_senders` requests declaring a 16 MiB body and sending a byte a
    second, and normal exports every half second meanwhile."""
    scale = ctx.scale
    env = _timeout_env(ctx, finding)
    traffic = ChaosTraffic(steps_per_run=3, failed_interval_s=None)
    deadline_s = scale.body_read_timeout + 20
    with (
        ctx.database("slow") as url,
        ctx.sidecar(url, env) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=120) as api,
    ):
        ctx.say(f"{scale.slow_senders} senders declaring 16 MiB, one byte a second")
        started = time.monotonic()
        slow = [
            RawUpload(sidecar.url, f"Content-Length: {16 * MIB}\r\n", timeout=deadline_s)
            for _ in range(scale.slow_senders)
        ]
        answered_at: dict[int, float] = {}
        trickling = threading.Thread(
            target=_trickle, args=(slow, answered_at, started + deadline_s), daemon=True
        )
        trickling.start()
        normal: list[Timed] = []
        time.sleep(1)
        while trickling.is_alive():
            normal.append(_normal_request(api, traffic))
            time.sleep(0.5)
        statuses = [sending.status(5) for sending in slow]
        for sending in slow:
            sending.close()
    latencies = sorted(result.seconds for result in normal)
    finding.add(
        f"{scale.slow_senders} slow senders (16 MiB declared, 1 byte/s)",
        statuses=[str(status) for status in statuses],
        answered_after_s=[round(answered_at[n] - started, 1) for n in sorted(answered_at)],
    )
    finding.add(
        "normal exports meanwhile",
        requests=len(normal),
        statuses={str(code): n for code, n in Counter(r.status for r in normal).items()},
        p50_s=round(latencies[len(latencies) // 2], 3) if latencies else None,
        max_s=round(latencies[-1], 3) if latencies else None,
    )
    finding.check("normal exports meanwhile: every one 200", all(r.status == 200 for r in normal))
    finding.check(
        f"normal exports meanwhile: under {scale.stall_limit_s:g} s each",
        bool(latencies) and latencies[-1] < scale.stall_limit_s,
    )
    finding.check(
        f"slow senders answered 408 after {scale.body_read_timeout:g} s",
        all(status in (408, 503) for status in statuses) and 408 in statuses,
    )


def _trickle(slow: list[RawUpload], answered_at: dict[int, float], deadline: float) -> None:
    """Send a byte a second on each upload until it is answered (or `deadline`)."""
    while len(answered_at) < len(slow) and time.monotonic() < deadline:
        for number, sending in enumerate(slow):
            if number in answered_at:
                continue
            if sending.answered() or not sending.send(b"\x0a"):
                answered_at[number] = time.monotonic()
        time.sleep(1)
