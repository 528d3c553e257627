"""Hostile drill 11: no client can hold ingest for the others (issue 55, items 2, 4, 5, 7),
on the sidecar's default settings.

- One idle connection declaring `Content-Length: 16777216` and sending one byte, then 100
  OTLP/HTTP and 50 OTLP/gRPC exports from other clients (before: every one refused until
  the 30 s body timeout, and the client simply reconnects).
- Eight uploads that send 15.9 MiB each and stall, while other clients export: how many
  of theirs are refused, and how soon the stalled ones are dropped (before: 62–64 %
  refused until the whole-body timeout).
- 5,000 connections from another loopback address that never finish their request heads
  (slowloris), while `/healthz` is asked every 0.1 s (before: at the file-descriptor limit
  new connections, `/healthz` included, timed out).
- 100 OTLP/gRPC calls of 45 MiB refused (item 5): the RSS they leave behind.
"""

from __future__ import annotations

import contextlib
import resource
import socket
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from faultfinder.drills.chaos.hostile_bounds import tree_mb, wire_field
from faultfinder.drills.chaos.hostile_context import MIB, DrillContext, Finding
from faultfinder.drills.chaos.hostile_probes import PROTOBUF_HEADERS, RawUpload
from faultfinder.drills.chaos.traffic import ChaosTraffic

__all__ = ["holds_drill"]

_EXPORT = f"/{trace_service_pb2.DESCRIPTOR.services_by_name['TraceService'].full_name}/Export"


def _http_answers(url: str, count: int, traffic: ChaosTraffic) -> Counter[str]:
    answers: Counter[str] = Counter()
    with httpx.Client(timeout=60) as client:
        for _ in range(count):
            body = traffic.next_request().body
            try:
                status = client.post(f"{url}/v1/traces", content=body, headers=PROTOBUF_HEADERS)
                answers[str(status.status_code)] += 1
            except httpx.HTTPError as error:
                answers[type(error).__name__] += 1
    return answers


def _grpc_answers(target: str, count: int, traffic: ChaosTraffic) -> Counter[str]:
    answers: Counter[str] = Counter()
    with grpc.insecure_channel(target) as channel:
        export = channel.unary_unary(_EXPORT)
        for _ in range(count):
            try:
                export(traffic.next_request().body, timeout=60)
                answers["OK"] += 1
            except grpc.RpcError as error:
                answers[error.code().name] += 1  # type: ignore[attr-defined]
    return answers


@contextlib.contextmanager
def _file_limit(soft: int) -> Iterator[int]:
    """This process's soft file-descriptor limit raised toward `soft` (never past the hard
    limit); yields the limit set."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = min(soft, before[1])
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(limit, before[0]), before[1]))
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)


def _slow_head(url: str) -> socket.socket | None:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.socket()
    sock.settimeout(5)
    try:
        sock.bind(("127.0.0.2", 0))
        sock.connect((host, int(port)))
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nX-Waiting: ".encode())
    except OSError:
        sock.close()
        return None
    return sock


def _answer(sock: socket.socket) -> str:
    sock.settimeout(15)
    try:
        data = sock.recv(4096)
    except (ConnectionResetError, TimeoutError, OSError) as error:
        return type(error).__name__
    return data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "closed"


def holds_drill(ctx: DrillContext, finding: Finding) -> None:
    """Drill 11 (module docstring)."""
    quick = ctx.scale.quick
    traffic = ChaosTraffic(steps_per_run=3, failed_interval_s=None)
    with ctx.database("holds") as url, ctx.sidecar(url, grpc=True) as sidecar:
        # One idle connection declaring 16 MiB.
        idle = RawUpload(sidecar.url, f"Content-Length: {16 * MIB}\r\n")
        try:
            idle.send(b"\x0a")
            time.sleep(0.3)
            http = _http_answers(sidecar.url, 20 if quick else 100, traffic)
            grpc_answers = _grpc_answers(sidecar.grpc_target or "", 10 if quick else 50, traffic)
        finally:
            idle.close()
        probe = "one idle connection declaring 16 MiB"
        finding.add(probe, http=dict(http), grpc=dict(grpc_answers))
        finding.check(f"{probe}: no other export refused",
                      set(http) == {"200"} and set(grpc_answers) == {"OK"})  # fmt: skip

        # Uploads that send 15.9 MiB each and stall.
        count = 2 if quick else 8
        size = (2 if quick else 16) * MIB
        stalled = [RawUpload(sidecar.url, f"Content-Length: {size}\r\n") for _ in range(count)]
        try:
            for upload in stalled:
                upload.send(b"\x00" * (size - 64 * 1024))
            started = time.monotonic()
            during = _http_answers(sidecar.url, 20 if quick else 50, traffic)

            def answered(upload: RawUpload) -> tuple[str, float]:
                status = upload.status(60)
                return str(status), round(time.monotonic() - started, 1)

            with ThreadPoolExecutor(len(stalled)) as pool:
                answers = list(pool.map(answered, stalled))
        finally:
            for upload in stalled:
                upload.close()
        statuses = Counter(status for status, _ in answers)
        dropped_after = max((at for status, at in answers if status == "408"), default=0.0)
        refused_after = max((at for status, at in answers if status == "503"), default=0.0)
        after = _http_answers(sidecar.url, 10, traffic)
        probe = f"{count} uploads of {size // MIB - 0.1:g} MiB that stall"
        refused = sum(n for answer, n in during.items() if answer != "200")
        share = round(100 * refused / max(1, sum(during.values())), 1)
        finding.add(probe, others_during=dict(during), stalled_answers=dict(statuses),
                    dropped_408_within_s=dropped_after, refused_503_heard_after_s=refused_after,
                    others_after=dict(after), pct_refused_during=share)  # fmt: skip
        # Those let in are dropped with 408 at the progress timeout (giving their bytes
        # back); those past the in-flight limit were refused with 503 and held nothing.
        finding.check(f"{probe}: those let in dropped with 408 within 10 s",
                      "408" in statuses and set(statuses) <= {"408", "503"}
                      and dropped_after < 10)  # fmt: skip
        finding.check(f"{probe}: no other export refused while they stall", set(during) == {"200"})
        finding.check(f"{probe}: all taken again once dropped", set(after) == {"200"})

        # Slowloris heads from another loopback address.
        wanted = 500 if quick else 5_000
        with _file_limit(wanted + 500) as limit, contextlib.ExitStack() as stack:
            heads = []
            for _ in range(min(wanted, limit - 200)):
                sock = _slow_head(sidecar.url)
                if sock is not None:
                    heads.append(stack.enter_context(contextlib.closing(sock)))
            checks, worst = Counter[str](), 0.0
            with httpx.Client(base_url=sidecar.url, timeout=5) as client:
                for _ in range(30):
                    begun = time.monotonic()
                    try:
                        checks[str(client.get("/healthz").status_code)] += 1
                    except httpx.HTTPError as error:
                        checks[type(error).__name__] += 1
                    worst = max(worst, time.monotonic() - begun)
                    time.sleep(0.1)
            head_answers = Counter(_answer(sock) for sock in heads)
        probe = f"{len(heads):,} slowloris heads"
        finding.add(probe, healthz=dict(checks), healthz_worst_s=round(worst, 3),
                    head_answers=dict(head_answers))  # fmt: skip
        finding.check(f"{probe}: /healthz answered every time", set(checks) == {"200"})
    grpc_refusals(ctx, finding)


def grpc_refusals(ctx: DrillContext, finding: Finding) -> None:
    """Issue 55, item 5: refused OTLP/gRPC calls must not keep their requests. 100 calls of
    a 45 MiB message without the ingest key the sidecar requires (before: two such
    messages held 8.4 GB, still held 300 requests later); the process tree's RSS after the
    5th call and 3 s after the last."""
    calls = 10 if ctx.scale.quick else 100
    size = (2 if ctx.scale.quick else 45) * MIB
    message = wire_field(1, b"\x0a\x00" * (size // 2))  # resource_spans of empty resources
    env = {"FAULTFINDER_INGEST_KEYS": "a-key-the-caller-does-not-have"}
    with (
        ctx.database("grpc-refusals") as url,
        ctx.sidecar(url, env, grpc=True) as sidecar,
        grpc.insecure_channel(
            sidecar.grpc_target or "",
            options=[("grpc.max_send_message_length", 64 * MIB)],
        ) as channel,
    ):
        export = channel.unary_unary(_EXPORT)
        codes: Counter[str] = Counter()
        rss_after_5 = 0.0
        for call in range(calls):
            try:
                export(message, timeout=60)
                codes["OK"] += 1
            except grpc.RpcError as error:
                codes[error.code().name] += 1  # type: ignore[attr-defined]
            if call == 4:
                rss_after_5 = tree_mb(sidecar.pid, "VmRSS")
        time.sleep(3)  # the heap trimmer looks every second (`server/heap_trimmer.py`)
        grown = round(tree_mb(sidecar.pid, "VmRSS") - rss_after_5, 1)
    probe = f"{calls} refused {size // MIB} MiB gRPC calls"
    finding.add(probe, answers=dict(codes), rss_after_5th_mb=rss_after_5, grown_since_mb=grown)
    finding.check(f"{probe}: all refused", "OK" not in codes and sum(codes.values()) == calls)
    finding.check(f"{probe}: RSS within 100 MB of the 5th call", grown < 100)
