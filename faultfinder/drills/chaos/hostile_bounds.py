"""Hostile drills 9 and 10: the long versions of two findings of the second hostile round
(issue 55), on the sidecar's default limits.

9. Small requests, gigabytes (the issue's item 1): a 426-byte body gzipped twice that
   would inflate to 64 MiB of empty spans, 16 MiB of empty spans, 16 MiB of empty
   OTLP/JSON spans and one span of 8,000,000 empty events, each alone and then four
   senders of each at once; peak RSS of the whole process tree (the sidecar and its
   decoder processes), the worst latency of a canary exporter and of `/healthz`.
10. Storage faults and deep values (item 11 and item 10): the WAL index (`<db>-shm`)
   made immutable under the running server (it died of SIGBUS), an attribute value
   nested 40 kvlists deep (refused whole, 400), and a label whose `details` nest 300
   levels (answered 500 yet stored, and the run's labels answered 500 from then on).
"""

from __future__ import annotations

import contextlib
import gzip
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.engine import make_url

from faultfinder.drills.chaos.hostile_context import MIB, DrillContext, Finding
from faultfinder.drills.chaos.hostile_probes import PROTOBUF_HEADERS, IngestProbe, timed
from faultfinder.drills.ingest import process_memory_kb

__all__ = ["bodies_drill", "reset_peaks", "storage_drill", "tree_mb", "wire_field"]

JSON_HEADERS = {"content-type": "application/json"}


def wire_field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field: its key, its length, `payload`."""
    out, value = bytearray(), number << 3 | 2
    for part in (value, len(payload)):
        while part >= 0x80:
            out.append(part & 0x7F | 0x80)
            part >>= 7
        out.append(part)
    return bytes(out) + payload


def _spans_request(spans: bytes) -> bytes:
    return wire_field(1, wire_field(2, spans))  # resource_spans → scope_spans → the spans


def _empty_spans(size: int) -> bytes:
    return _spans_request(b"\x12\x00" * (size // 2))


def _span_with_events(events: int) -> bytes:
    span = wire_field(1, b"\x09" * 16) + wire_field(2, b"\x02" * 8) + wire_field(5, b"root")
    return _spans_request(wire_field(2, span + b"\x5a\x00" * events))


def _empty_json_spans(size: int) -> bytes:
    spans = (size - 100) // 3
    head = b'{"resourceSpans":[{"scopeSpans":[{"spans":['
    return head + b",".join([b"{}"] * spans) + b"]}]}]}"


def _tree(pid: int) -> list[int]:
    """`pid` and every process below it."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                children = (task / "children").read_text().split()
                queue.extend(int(child) for child in children)
    return found


def reset_peaks(pid: int) -> None:
    for member in _tree(pid):
        with contextlib.suppress(OSError), open(f"/proc/{member}/clear_refs", "w") as handle:
            handle.write("5")


def tree_mb(pid: int, key: str) -> float:
    """The sum of `key` (VmRSS now, VmHWM the peak since the last reset) over the tree."""
    total = sum(process_memory_kb(member).get(key) or 0 for member in _tree(pid))
    return round(total / 1024, 1)


@contextlib.contextmanager
def _healthz_worst(url: str) -> Iterator[list[float]]:
    """The longest `/healthz` answer while the block runs (seconds, in the list at exit)."""
    worst = [0.0]
    done = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            while not done.is_set():
                started = time.monotonic()
                with contextlib.suppress(httpx.HTTPError):
                    client.get("/healthz")
                worst[0] = max(worst[0], time.monotonic() - started)
                done.wait(0.05)

    thread = threading.Thread(target=poll, name="healthz-probe", daemon=True)
    thread.start()
    try:
        yield worst
    finally:
        done.set()
        thread.join()


def bodies_drill(ctx: DrillContext, finding: Finding) -> None:
    """Drill 9 (module docstring)."""
    scale = ctx.scale
    size = 2 * MIB if scale.quick else 16 * MIB
    events = 3_000_000 if scale.quick else 8_000_000  # over MAX_FIELDS_PER_REQUEST either way
    twice = gzip.compress(gzip.compress(_empty_spans(64 * MIB - 16), 9), 9)
    bodies: list[tuple[str, bytes, dict[str, str], int]] = [
        (
            f"{len(twice)} B gzipped twice (64 MiB of empty spans)",
            twice,
            {**PROTOBUF_HEADERS, "content-encoding": "gzip, gzip"},
            400,
        ),
        (f"{size // MIB} MiB of empty spans", _empty_spans(size - 16), PROTOBUF_HEADERS, 413),
        (f"{size // MIB} MiB of empty OTLP/JSON spans", _empty_json_spans(size), JSON_HEADERS, 413),
        (f"one span of {events:,} events", _span_with_events(events), PROTOBUF_HEADERS, 413),
    ]
    with (
        ctx.database("bodies") as url,
        ctx.sidecar(url) as sidecar,
        IngestProbe(sidecar.url) as canary,
        httpx.Client(base_url=sidecar.url, timeout=300) as api,
    ):
        finding.add("sidecar at rest", rss_tree_mb=tree_mb(sidecar.pid, "VmRSS"))
        for name, body, headers, expected in bodies:
            ctx.say(f"POST /v1/traces: {name}")
            reset_peaks(sidecar.pid)
            with _healthz_worst(sidecar.url) as healthz:
                result = timed(lambda: api.post("/v1/traces", content=body, headers=headers))  # noqa: B023
            _measure(
                ctx,
                finding,
                name,
                sidecar.pid,
                result.figures(),
                healthz[0],
                canary.worst_between(result.started, result.ended),
            )
            finding.check(f"{name}: {expected}", result.status == expected)
        name = "4 senders of each at once"
        ctx.say(f"POST /v1/traces: {name}")
        reset_peaks(sidecar.pid)
        started = time.monotonic()
        with _healthz_worst(sidecar.url) as healthz, ThreadPoolExecutor(16) as pool:
            sent = [(body, headers) for _, body, headers, _ in bodies for _ in range(4)]
            statuses = list(pool.map(lambda item: _post(sidecar.url, *item), sent))
        expected_all = [expected for *_, expected in bodies for _ in range(4)]
        _measure(
            ctx,
            finding,
            name,
            sidecar.pid,
            {"statuses": sorted(set(statuses))},
            healthz[0],
            canary.worst_between(started, time.monotonic()),
        )
        # Each is refused as it was alone, or deferred (503 + Retry-After: the in-flight
        # byte budget is shared) — never taken, never a 500.
        finding.check(
            f"{name}: each refused as alone, or deferred (503)",
            all(got in (want, 503) for got, want in zip(statuses, expected_all, strict=True)),
        )
        summary = canary.summary()
        answers = Counter(str(sample.status) for sample in canary.samples)
        finding.add("canary exporter", **summary, answers=dict(answers))
        # 503 + Retry-After is backpressure an exporter retries; anything else loses spans.
        finding.check(
            "the canary's exports stored or deferred (200/503)", set(answers) <= {"200", "503"}
        )


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    try:
        return httpx.post(
            f"{url}/v1/traces", content=body, headers=headers, timeout=300
        ).status_code
    except httpx.HTTPError:
        return 0


def _measure(
    ctx: DrillContext,
    finding: Finding,
    name: str,
    pid: int,
    answer: dict[str, Any],
    healthz_s: float,
    canary_s: float,
) -> None:
    peak = tree_mb(pid, "VmHWM")
    finding.add(
        name,
        **answer,
        rss_tree_peak_mb=peak,
        canary_stall_s=round(canary_s, 3),
        healthz_stall_s=round(healthz_s, 3),
    )
    finding.check(
        f"{name}: peak RSS < {ctx.scale.rss_limit_mb:g} MB", peak < ctx.scale.rss_limit_mb
    )
    finding.check(
        f"{name}: canary stall < {ctx.scale.stall_limit_s:g} s", canary_s < ctx.scale.stall_limit_s
    )
    finding.check(
        f"{name}: /healthz stall < {ctx.scale.stall_limit_s:g} s",
        healthz_s < ctx.scale.stall_limit_s,
    )


def _kvlists(levels: int) -> bytes:
    value = wire_field(1, b"leaf")
    for level in range(levels):
        value = wire_field(
            6, wire_field(1, wire_field(1, f"k{level}".encode()) + wire_field(2, value))
        )
    return value


def _deep_attribute_request(levels: int) -> bytes:
    attribute = wire_field(1, b"deep") + wire_field(2, _kvlists(levels))
    span = (
        wire_field(1, b"\x0a" * 16)
        + wire_field(2, b"\x03" * 8)
        + wire_field(5, b"deep")
        + wire_field(9, attribute)
    )
    return _spans_request(wire_field(2, span))


def _deep_details(levels: int) -> dict[str, Any]:
    details: dict[str, Any] = {"leaf": True}
    for _ in range(levels):
        details = {"d": details}
    return details


def _chattr(path: Path, on: bool) -> bool:
    done = subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True)
    return done.returncode == 0


def storage_drill(ctx: DrillContext, finding: Finding) -> None:
    """Drill 10 (module docstring)."""
    with (
        ctx.database("storage") as url,
        ctx.sidecar(url) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=60) as api,
    ):
        deep = timed(
            lambda: api.post(
                "/v1/traces", content=_deep_attribute_request(40), headers=PROTOBUF_HEADERS
            )
        )
        truncated = api.get("/api/stats/ingest").json().get("values_truncated")
        finding.add("a value 40 kvlists deep", **deep.figures(), values_truncated=truncated)
        finding.check(
            "a value 40 kvlists deep: 200, the value cut", deep.status == 200 and bool(truncated)
        )

        deadline = time.monotonic() + 30
        while not (runs := api.get("/api/runs").json()["items"]) and time.monotonic() < deadline:
            time.sleep(0.5)
        if runs:
            run_id = runs[0]["id"]
            label = {"agent": "a", "step": 0, "details": _deep_details(300)}
            answer = timed(lambda: api.post(f"/api/runs/{run_id}/labels", json=label))
            listed = api.get(f"/api/runs/{run_id}/labels")
            finding.add(
                "a label nested 300 levels",
                **answer.figures(),
                labels_after=listed.status_code,
                labels_stored=len(listed.json()) if listed.status_code == 200 else None,
            )
            finding.check(
                "a label nested 300 levels: 400, nothing stored",
                answer.status == 400 and listed.status_code == 200 and listed.json() == [],
            )

        if ctx.dialect != "sqlite":
            finding.notes.append("the immutable WAL index is a SQLite drill")
            return
        shm = Path(f"{make_url(url).database}-shm")
        if not shm.exists() or not _chattr(shm, True):
            finding.notes.append("chattr +i not permitted here: the immutable WAL index not run")
            return
        try:
            small = _span_with_events(1)
            refused = timed(lambda: api.post("/v1/traces", content=small, headers=PROTOBUF_HEADERS))
            ready = api.get("/readyz").status_code
            alive = sidecar.process is not None and sidecar.process.poll() is None
            healthz = api.get("/healthz").status_code if alive else 0
        finally:
            _chattr(shm, False)
        started = time.monotonic()
        while time.monotonic() - started < 60 and api.get("/readyz").status_code != 200:
            time.sleep(0.5)
        recovered = round(time.monotonic() - started, 1)
        rejected = api.get("/api/stats/ingest").json().get("spans_rejected")
        finding.add(
            "the WAL index made immutable",
            **refused.figures(),
            readyz=ready,
            healthz=healthz,
            alive=alive,
            ready_again_s=recovered,
            spans_rejected=rejected,
        )
        finding.check(
            "immutable WAL index: 503, /readyz 503, alive",
            refused.status == 503 and ready == 503 and alive,
        )
        finding.check("writable again: ready, no span given up", recovered < 60 and not rejected)
