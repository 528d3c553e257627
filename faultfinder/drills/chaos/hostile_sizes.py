"""Hostile drill 12: runs bounded in bytes, and a failed run over the span cap (issue 55,
items 3 and 9), on the sidecar's default settings unless said.

- One failed run of 300 agent steps, each with a 1 MiB output, in gzipped requests (before:
  250 MB stored, the automatic attribution peaked at 2.46 GB, the run page was 262 MB of
  HTML): stored bytes, the process tree's peak while it is attributed, the page's size.
- 200 runs whose run ids and agent names are 1 MiB each (before: a 6.5 GB database,
  `/api/runs?limit=500` 1.52 GB at 7.5 GB RSS, `/ui/` 360 MB).
- A failed run past its span cap (200 here) whose failed root comes last, as SDKs send it
  (before: the root was refused, the run ended `complete` and was never attributed).
"""

from __future__ import annotations

import gzip
import os
import time
from collections.abc import Sequence
from typing import Any

import httpx
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from sqlalchemy.engine import make_url

from faultfinder.drills.chaos.hostile_bodies import failed_run_spans, named_run_body
from faultfinder.drills.chaos.hostile_bounds import reset_peaks, tree_mb
from faultfinder.drills.chaos.hostile_context import MIB, DrillContext, Finding
from faultfinder.drills.chaos.hostile_probes import PROTOBUF_HEADERS

__all__ = ["sizes_drill"]

_SCOPE = InstrumentationScope("faultfinder.drills.chaos.hostile", "0.1.0")
_GZIP = {**PROTOBUF_HEADERS, "content-encoding": "gzip"}


def _bodies(spans: Sequence[ReadableSpan], per_request: int) -> list[bytes]:
    return [
        gzip.compress(encode_spans(spans[i : i + per_request]).SerializeToString(), 6)
        for i in range(0, len(spans), per_request)
    ]


def _database_bytes(url: str) -> int | None:
    database = make_url(url).database
    if make_url(url).get_backend_name() != "sqlite" or not database:
        return None
    return sum(
        os.path.getsize(path) for path in (database, f"{database}-wal") if os.path.exists(path)
    )


def _grown(before: int | None, after: int | None) -> float | None:
    return None if after is None else round((after - (before or 0)) / 1e6, 1)


def _settled(api: httpx.Client, timeout: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = api.get("/api/runs", params={"limit": 5}).json()["items"]
        if runs and runs[0]["status"] in ("attributed", "complete"):
            found: dict[str, Any] = runs[0]
            return found
        time.sleep(0.5)
    return None


def _timed_get(api: httpx.Client, path: str, **params: Any) -> dict[str, Any]:
    started = time.monotonic()
    answer = api.get(path, params=params)
    return {"status": answer.status_code, "bytes": len(answer.content),
            "seconds": round(time.monotonic() - started, 2)}  # fmt: skip


def sizes_drill(ctx: DrillContext, finding: Finding) -> None:
    """Drill 12 (module docstring)."""
    quick = ctx.scale.quick
    _large_outputs(ctx, finding, steps=30 if quick else 300)
    _long_names(ctx, finding, runs=20 if quick else 200)
    _over_the_cap(ctx, finding)


def _large_outputs(ctx: DrillContext, finding: Finding, *, steps: int) -> None:
    probe = f"one run of {steps} steps of 1 MiB"
    outputs = [f"step {n} " + f"{n % 10}" * MIB for n in range(steps)]
    bodies = _bodies(
        failed_run_spans("large outputs", [("worker", output) for output in outputs]), 10
    )
    with (
        ctx.database("sizes-large") as url,
        ctx.sidecar(url) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=300) as api,
    ):
        before = _database_bytes(url)
        reset_peaks(sidecar.pid)
        answers = [api.post("/v1/traces", content=body, headers=_GZIP).status_code
                   for body in bodies]  # fmt: skip
        run = _settled(api, 300)
        peak = tree_mb(sidecar.pid, "VmHWM")
        after = _database_bytes(url)
        page = _timed_get(api, f"/ui/runs/{run['id']}") if run else {}
        finding.add(probe, sent_gzipped_mb=round(sum(map(len, bodies)) / 1e6, 2),
                    answers=sorted(set(answers)), status=run and run["status"],
                    stored_mb=_grown(before, after), rss_tree_peak_mb=peak, page=page)  # fmt: skip
        finding.check(f"{probe}: attributed", bool(run) and run["status"] == "attributed")  # type: ignore[index]
        finding.check(f"{probe}: peak RSS < {ctx.scale.rss_limit_mb:g} MB",
                      peak < ctx.scale.rss_limit_mb)  # fmt: skip
        finding.check(f"{probe}: run page < 5 MB", 0 < page.get("bytes", 0) < 5e6)


def _long_names(ctx: DrillContext, finding: Finding, *, runs: int) -> None:
    probe = f"{runs} runs with 1 MiB run ids and agent names"
    with (
        ctx.database("sizes-names") as url,
        ctx.sidecar(url) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=300) as api,
    ):
        before = _database_bytes(url)
        reset_peaks(sidecar.pid)
        answers = set()
        for n in range(runs):
            name = f"{n} " + "r" * MIB
            body = gzip.compress(named_run_body(name, ["a" * MIB, "b" * MIB]), 6)
            answers.add(api.post("/v1/traces", content=body, headers=_GZIP).status_code)
        time.sleep(2)
        listing = _timed_get(api, "/api/runs", limit=500)
        overview = _timed_get(api, "/ui/")
        after = _database_bytes(url)
        finding.add(probe, answers=sorted(answers), listing=listing, ui=overview,
                    rss_tree_peak_mb=tree_mb(sidecar.pid, "VmHWM"),
                    stored_mb=_grown(before, after))  # fmt: skip
        finding.check(f"{probe}: /api/runs?limit=500 < 10 MB", 0 < listing["bytes"] < 10e6)
        finding.check(f"{probe}: /ui/ < 10 MB", 0 < overview["bytes"] < 10e6)


def _over_the_cap(ctx: DrillContext, finding: Finding) -> None:
    probe = "a failed run past its span cap, its root last"
    spans = failed_run_spans("over the cap", [("worker", f"{n}") for n in range(300)])
    with (
        ctx.database("sizes-cap") as url,
        ctx.sidecar(url, {"FAULTFINDER_MAX_SPANS_PER_RUN": "200"}) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=120) as api,
    ):
        answers = [api.post("/v1/traces", content=body, headers=_GZIP).status_code
                   for body in _bodies(spans, 50)]  # fmt: skip
        run = _settled(api, 120)
        detail = api.get(f"/api/runs/{run['id']}").json() if run else {}
        finding.add(probe, answers=sorted(set(answers)), status=run and run["status"],
                    outcome=detail.get("outcome"),
                    attributions=len(detail.get("attributions") or []))  # fmt: skip
        finding.check(f"{probe}: ends failed and attributed",
                      bool(run) and run["status"] == "attributed"  # type: ignore[index]
                      and bool(detail.get("attributions")))  # fmt: skip
