"""Hostile drills 1 and 6 (issue 28): one in-limit request, a gzip bomb or a flood into one
run must not exhaust the sidecar's memory, and a run far longer than anyone reads must not
stall ingest or the pages."""

from __future__ import annotations

import asyncio
import functools
import time
import urllib.parse
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from faultfinder.drills.chaos.hostile_bodies import (
    RunOfSteps,
    attribute_request,
    gzip_bomb,
    minimal_spans_body,
    partial_success,
)
from faultfinder.drills.chaos.hostile_context import MIB, DrillContext, Finding
from faultfinder.drills.chaos.hostile_probes import (
    PROTOBUF_HEADERS,
    IngestProbe,
    MemoryWatch,
    Timed,
    timed,
)
from faultfinder.drills.chaos.stored_state import run_span_count

__all__ = ["GRPC_EXPORT", "large_run_drill", "memory_drill"]

GRPC_EXPORT = f"/{trace_service_pb2.DESCRIPTOR.services_by_name['TraceService'].full_name}/Export"
"""The OTLP/gRPC method, called with raw bytes."""


def _reason(result: Timed) -> str:
    """The message of an OTLP/HTTP error answer (a google.rpc.Status), shortened."""
    if result.response is None or not result.response.content:
        return ""
    try:
        message: str = status_pb2.Status.FromString(result.response.content).message
    except Exception:
        message = result.response.text
    return message[:120]


def memory_drill(ctx: DrillContext, finding: Finding) -> None:
    """Item 1: the issue's 16 MiB body of 559,204 spans (HTTP and gRPC), its 64 MiB gzip
    bomb, and a flood of in-limit requests into one run, then reading that run."""
    scale = ctx.scale
    with (
        ctx.database("memory") as url,
        ctx.sidecar(url, scale.limits_env(), grpc=True) as sidecar,
        MemoryWatch(sidecar.pid) as memory,
        httpx.Client(base_url=sidecar.url, timeout=300) as api,
    ):
        finding.add("sidecar at rest", rss_mb=memory.rss_mb())
        _huge_body(ctx, finding, api, memory, sidecar.grpc_target or "")
        bomb = gzip_bomb(scale.max_decompressed_bytes)
        probe = f"gzip bomb {len(bomb) / 1e6:.1f} MB → {scale.max_decompressed_bytes // MIB} MiB"
        ctx.say(f"POST /v1/traces: {probe}")
        with memory.phase() as phase:
            result = _post(api, bomb, **{"content-encoding": "gzip"})
        del bomb
        finding.add(probe, **_answer(result), rss_peak_mb=phase.peak_mb, rss_after_mb=phase.end_mb)
        finding.check(f"{probe}: 413", result.status == 413)
        _check_rss(ctx, finding, probe, phase.peak_mb)

        run_id = _flood(ctx, finding, api, memory)
        stored = asyncio.run(run_span_count(url, run_id))
        finding.add("flood", spans_stored_in_the_run=stored)
        finding.check(
            f"the flooded run holds {scale.max_spans_per_run:,} spans",
            stored == scale.max_spans_per_run,
        )
        _read_after_flood(ctx, finding, api, memory, run_id)


def _post(api: httpx.Client, body: bytes, **headers: str) -> Timed:
    """POST an OTLP/HTTP protobuf body, timed."""
    return timed(
        lambda: api.post("/v1/traces", content=body, headers={**PROTOBUF_HEADERS, **headers})
    )


def _huge_body(
    ctx: DrillContext, finding: Finding, api: httpx.Client, memory: MemoryWatch, grpc_target: str
) -> None:
    """The issue's 16 MiB body of minimal spans, over HTTP and over gRPC."""
    spans = ctx.scale.huge_body_spans
    body = minimal_spans_body(spans)
    probe = f"{len(body) / MIB:.1f} MiB body, {spans:,} spans"
    ctx.say(f"POST /v1/traces: {probe}")
    with memory.phase() as phase:
        result = _post(api, body)
    finding.add(probe, **_answer(result), rss_peak_mb=phase.peak_mb, rss_after_mb=phase.end_mb)
    finding.check(f"{probe}: 413", result.status == 413)
    _check_rss(ctx, finding, probe, phase.peak_mb)
    ctx.say("the same body over OTLP/gRPC")
    with memory.phase() as phase, grpc.insecure_channel(grpc_target) as channel:
        code, details = _grpc_export(channel, body)
    finding.add(f"{probe}, gRPC", code=code, reason=details, rss_peak_mb=phase.peak_mb)
    finding.check(f"{probe} over gRPC: RESOURCE_EXHAUSTED", code == "RESOURCE_EXHAUSTED")


def _answer(result: Timed) -> dict[str, object]:
    return {"status": result.status, "seconds": round(result.seconds, 3), "reason": _reason(result)}


def _check_rss(ctx: DrillContext, finding: Finding, probe: str, peak: float | None) -> None:
    limit = ctx.scale.rss_limit_mb
    finding.check(f"{probe}: RSS peak under {limit:g} MB", peak is not None and peak < limit)


def _grpc_export(channel: grpc.Channel, body: bytes) -> tuple[str, str]:
    export = channel.unary_unary(GRPC_EXPORT)
    try:
        export(body, timeout=120)
    except grpc.RpcError as error:
        return error.code().name, (error.details() or "")[:120]
    return "OK", ""


def _flood(ctx: DrillContext, finding: Finding, api: httpx.Client, memory: MemoryWatch) -> str:
    """Requests of `max_spans_per_request` spans each into one run, three at a time."""
    scale = ctx.scale
    run = RunOfSteps(f"hostile-flood-{uuid.uuid4().hex[:8]}", failed=False)
    per_request = scale.max_spans_per_request
    bodies = [run.request(per_request - 1)]  # the first one carries the run's root too
    bodies += [run.request(per_request) for _ in range(scale.flood_requests - 1)]
    sent = per_request * scale.flood_requests
    ctx.say(f"flood: {len(bodies)} requests of {per_request:,} spans into run {run.run_id}")

    started = time.monotonic()
    with memory.phase() as phase, ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda body: _post(api, body), bodies))
    refused = [
        partial_success(result.response.content)[0]
        for result in results
        if result.response is not None and result.status == 200
    ]
    statuses = Counter(result.status for result in results)
    finding.add(
        "flood",
        requests=f"{len(bodies)} × {per_request:,} spans, one run",
        statuses=dict(statuses),
        spans_refused_as_partial_success=sum(refused),
        seconds=round(time.monotonic() - started, 1),
        slowest_request_s=round(max(result.seconds for result in results), 2),
        rss_peak_mb=phase.peak_mb,
        rss_after_mb=phase.end_mb,
    )
    finding.check("flood: every request answered 200", set(statuses) == {200})
    finding.check(
        "flood: the spans past the run's limit refused as partial success",
        sum(refused) == sent - scale.max_spans_per_run,
    )
    _check_rss(ctx, finding, "flood", phase.peak_mb)
    return run.run_id


def _read_after_flood(
    ctx: DrillContext, finding: Finding, api: httpx.Client, memory: MemoryWatch, run_id: str
) -> None:
    quoted = urllib.parse.quote(run_id, safe="")
    for probe, path in (
        ("GET /api/runs", "/api/runs"),
        ("GET /api/runs/{id}", f"/api/runs/{quoted}"),
    ):
        ctx.say(f"after the flood: {probe}")
        with memory.phase() as phase:
            result = timed(functools.partial(api.get, path))
        finding.add(
            f"{probe} after the flood",
            **result.figures(),
            rss_peak_mb=phase.peak_mb,
            rss_after_mb=phase.end_mb,
        )
        finding.check(f"{probe} after the flood: 200", result.status == 200)
        _check_rss(ctx, finding, f"{probe} after the flood", phase.peak_mb)


def large_run_drill(ctx: DrillContext, finding: Finding) -> None:
    """Item 6: a run sent as `large_run_requests` requests of the most spans a request may
    carry, attributed, then its page, the API and long posted trajectories timed while a
    background sender measures how long ingest stalls."""
    scale = ctx.scale
    env = {**scale.limits_env(), "FAULTFINDER_QUIET_PERIOD": "2"}
    with (
        ctx.database("large") as url,
        ctx.sidecar(url, env) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=600) as api,
        IngestProbe(sidecar.url) as probe,
    ):
        time.sleep(3)
        finding.add("ingest probe at rest", **probe.summary())
        run = RunOfSteps(f"hostile-large-{uuid.uuid4().hex[:8]}")
        quoted = urllib.parse.quote(run.run_id, safe="")
        _send_large_run(ctx, finding, api, probe, run)
        _wait_attributed(ctx, finding, api, probe, quoted)
        reads = {
            "GET /ui/runs/{id}": f"/ui/runs/{quoted}",
            "GET /ui/runs/{id}, last page": f"/ui/runs/{quoted}?steps_from="
            f"{scale.max_spans_per_run - 250}",
            "GET /api/runs": "/api/runs",
            "GET /api/runs?status=attributed (lists it)": "/api/runs?status=attributed",
            "GET /api/runs/{id}": f"/api/runs/{quoted}",
            "GET /api/runs/{id}, 250 steps": f"/api/runs/{quoted}?steps_limit=250",
        }
        for name, path in reads.items():
            ctx.say(name)
            result = timed(functools.partial(api.get, path))
            stall = probe.worst_between(result.started, result.ended)
            finding.add(name, **result.figures(), ingest_stall_s=stall)
            finding.check(f"{name}: 200", result.status == 200)
            _check_stall(ctx, finding, name, stall)
        for steps in scale.attribute_steps:
            for attributor in (
                (None, "first_error") if steps <= scale.max_attribution_steps else (None,)
            ):
                _attribute(ctx, finding, api, probe, steps, attributor)
        finding.add("ingest probe overall", **probe.summary())
        finding.check("ingest probe: every request 200", probe.summary().get("not_200", 0) == 0)


def _check_stall(ctx: DrillContext, finding: Finding, name: str, stall: float) -> None:
    limit = ctx.scale.stall_limit_s
    finding.check(f"{name}: ingest stall under {limit:g} s", stall < limit)


def _send_large_run(
    ctx: DrillContext, finding: Finding, api: httpx.Client, probe: IngestProbe, run: RunOfSteps
) -> None:
    scale = ctx.scale
    per_request = scale.max_spans_per_request
    total = per_request * scale.large_run_requests
    ctx.say(f"sending a run of {total:,} spans in {scale.large_run_requests} requests")
    started = time.monotonic()
    results: list[Timed] = []
    refused = 0
    for number in range(scale.large_run_requests):
        body = run.request(per_request - 1 if number == 0 else per_request)
        result = _post(api, body)
        results.append(result)
        if result.response is not None and result.status == 200:
            refused += partial_success(result.response.content)[0]
    stall = probe.worst_between(started, time.monotonic())
    name = f"POST a run of {total:,} spans"
    finding.add(
        name,
        statuses=dict(Counter(result.status for result in results)),
        seconds=[round(result.seconds, 2) for result in results],
        spans_refused_as_partial_success=refused,
        ingest_stall_s=stall,
    )
    finding.check(f"{name}: every request 200", all(r.status == 200 for r in results))
    finding.check(
        f"{name}: the spans past the run's limit refused",
        refused == total - scale.max_spans_per_run,
    )
    _check_stall(ctx, finding, name, stall)


def _wait_attributed(
    ctx: DrillContext, finding: Finding, api: httpx.Client, probe: IngestProbe, quoted: str
) -> None:
    ctx.say("waiting for the run to be completed and attributed")
    started = time.monotonic()
    run: dict[str, object] = {}
    while time.monotonic() - started < 300:
        answer = api.get(f"/api/runs/{quoted}", params={"steps_limit": 1})
        if answer.status_code == 200:
            run = answer.json()
            if run.get("status") == "attributed":
                break
        time.sleep(1)
    stall = probe.worst_between(started, time.monotonic())
    finding.add(
        "the run, attributed",
        status=run.get("status"),
        n_spans=run.get("n_spans"),
        n_steps=run.get("n_steps"),
        seconds_to_attributed=round(time.monotonic() - started, 1),
        ingest_stall_s=stall,
    )
    finding.check("the run was attributed", run.get("status") == "attributed")
    _check_stall(ctx, finding, "completing and attributing the run", stall)


def _attribute(
    ctx: DrillContext,
    finding: Finding,
    api: httpx.Client,
    probe: IngestProbe,
    steps: int,
    attributor: str | None,
) -> None:
    body = attribute_request(steps, attributor=attributor)
    name = f"POST /api/attribute, {steps:,} steps ({attributor or 'default attributor'})"
    ctx.say(name)
    result = timed(
        lambda: api.post(
            "/api/attribute", content=body, headers={"content-type": "application/json"}
        )
    )
    stall = probe.worst_between(result.started, result.ended)
    finding.add(name, **result.figures(), request_bytes=len(body), ingest_stall_s=stall)
    expected = 413 if steps > ctx.scale.max_attribution_steps else 200
    finding.check(f"{name}: {expected}", result.status == expected)
    _check_stall(ctx, finding, name, stall)
