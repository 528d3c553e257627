"""Hostile drills 5 and 8 (issue 28): writes made with the dashboard's cookie from another
origin, and hostile names (a run id that forges a log line, a run id with slashes,
malformed gRPC messages, a right-to-left override in an agent's name)."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections import Counter
from typing import Any

import grpc
import httpx
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from faultfinder.drills.chaos.hostile_bodies import named_run_body
from faultfinder.drills.chaos.hostile_context import DrillContext, Finding
from faultfinder.drills.chaos.hostile_probes import PROTOBUF_HEADERS
from faultfinder.drills.chaos.hostile_runs import GRPC_EXPORT
from faultfinder.evaluation.sidecar import free_port

__all__ = ["csrf_drill", "names_drill"]

FAST = {"FAULTFINDER_QUIET_PERIOD": "0.3", "FAULTFINDER_SWEEP_INTERVAL": "0.2"}
KEY = "hostile-drill-key"

_WRITES: dict[str, tuple[str, dict[str, Any], str]] = {
    "label": ("labels", {"agent": "writer", "step": 1, "reason": "forged"}, "agent=writer&step=1"),
    "outcome": ("outcome", {"outcome": "success"}, "outcome=success"),
    "re-attribution": ("attributions", {"attributor": "first_error"}, "attributor=first_error"),
}
"""Write → (path under the run, JSON body, form body)."""
_OWN_STATUS = {"label": 201, "outcome": 200, "re-attribution": 202}


def _settled(api: httpx.Client, path: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    run: dict[str, Any] = {}
    while time.monotonic() < deadline:
        answer = api.get(path, params={"steps_limit": 1})
        if answer.status_code == 200:
            run = answer.json()
            if run["status"] == "attributed":
                break
        time.sleep(0.2)
    return run


def _state(api: httpx.Client, path: str) -> dict[str, Any]:
    """What a forged write would change: labels, jobs, status and outcome of the run."""
    run = api.get(path, params={"steps_limit": 1}).json()
    return {
        "labels": len(api.get(f"{path}/labels").json()),
        "jobs": len(api.get(f"{path}/jobs").json()),
        "status": run["status"],
        "outcome": run.get("outcome"),
    }


def csrf_drill(ctx: DrillContext, finding: Finding) -> None:
    """Item 5: the three writes the issue forged, made with the login cookie from another
    port of 127.0.0.1 and with bodies a page can send without a preflight; then from the
    dashboard's own origin."""
    env = {"FAULTFINDER_API_KEYS": KEY, **FAST}
    with ctx.database("csrf") as url, ctx.sidecar(url, env) as sidecar:
        keyed = httpx.Client(base_url=sidecar.url, headers={"x-api-key": KEY}, timeout=30)
        browser = httpx.Client(base_url=sidecar.url, timeout=30)
        with keyed, browser:
            sent = keyed.post(
                "/v1/traces",
                content=named_run_body("csrf-run", ["user", "writer"]),
                headers=PROTOBUF_HEADERS,
            )
            finding.check("the run was sent with the API key", sent.status_code == 200)
            path = "/api/runs/csrf-run"
            _settled(keyed, path)
            login = keyed.post("/ui/login")
            cookie = login.cookies.get("faultfinder_key")
            finding.add("dashboard login", status=login.status_code, cookie=bool(cookie))
            finding.check("the login set the cookie", bool(cookie))
            other = f"http://127.0.0.1:{free_port()}"
            attacks: dict[str, tuple[dict[str, str], bool, int]] = {
                f"JSON, Origin: {other}": (
                    {"content-type": "application/json", "origin": other},
                    True,
                    403,
                ),
                "JSON, Sec-Fetch-Site: same-site": (
                    {"content-type": "application/json", "sec-fetch-site": "same-site"},
                    True,
                    403,
                ),
                "text/plain, Sec-Fetch-Site: same-site": (
                    {"content-type": "text/plain", "sec-fetch-site": "same-site"},
                    True,
                    403,
                ),
                f"form, Origin: {other}": (
                    {"content-type": "application/x-www-form-urlencoded", "origin": other},
                    False,
                    403,
                ),
                "text/plain, the dashboard's own Origin": (
                    {"content-type": "text/plain", "origin": sidecar.url},
                    True,
                    415,
                ),
            }
            before = _state(keyed, path)
            ctx.say(f"{len(attacks)} forged variants of {len(_WRITES)} writes")
            for attack, (headers, as_json, expected) in attacks.items():
                statuses = {
                    write: _write(browser, path, write, headers, cookie or "", as_json)
                    for write in _WRITES
                }
                finding.add(f"forged: {attack}", **statuses)
                finding.check(
                    f"forged: {attack}: {expected}",
                    all(status == expected for status in statuses.values()),
                )
            after = _state(keyed, path)
            finding.add("the run after the forged writes", **after)
            finding.check("no forged write landed", after == before)
            own = {
                "content-type": "application/json",
                "origin": sidecar.url,
                "sec-fetch-site": "same-origin",
            }
            statuses = {
                write: _write(browser, path, write, own, cookie or "", True) for write in _WRITES
            }
            finding.add("the dashboard's own origin, JSON", **statuses)
            finding.check("the dashboard's own writes succeed", statuses == _OWN_STATUS)
            landed = _state(keyed, path)
            finding.add("the run after the dashboard's writes", **landed)
            finding.check(
                "the dashboard's writes landed",
                landed["labels"] == before["labels"] + 1 and landed["outcome"] == "success",
            )


def _write(
    client: httpx.Client,
    path: str,
    write: str,
    headers: dict[str, str],
    cookie: str,
    as_json: bool,
) -> int:
    suffix, payload, form = _WRITES[write]
    body = json.dumps(payload) if as_json else form
    answer = client.post(
        f"{path}/{suffix}",
        content=body,
        headers={**headers, "cookie": f"faultfinder_key={cookie}"},
    )
    return answer.status_code


FORGED = "2026-01-01 00:00:00,000 ERROR faultfinder.server: admin password reset"
EVIL_RUN = f"run-7\n{FORGED}"
SPOOFED_AGENT = "\u202etnega-yrtne"  # reads "entry-agent" where the override applies
SLASHED_RUN = "team/a/run-1"


def _malformed(count: int) -> list[bytes]:
    """`count` byte strings that are no `ExportTraceServiceRequest` (each checked here)."""
    valid = named_run_body("malformed", ["writer"])
    shapes = (
        lambda n: b"\xff" * (4 + n),  # an invalid tag
        lambda n: valid[: len(valid) // 2 - n],  # cut inside a nested message
        lambda n: b"\x0a" + bytes([40 + n]) + b"abc",  # a length past the end
        lambda n: b"\x0f" + bytes(range(n + 1)),  # wire type 7
    )
    messages = [shapes[n % len(shapes)](n) for n in range(count)]
    for message in messages:
        try:
            ExportTraceServiceRequest.FromString(message)
        except DecodeError:
            continue
        raise AssertionError(f"{message!r} parses as a request")
    return messages


def names_drill(ctx: DrillContext, finding: Finding) -> None:
    """Item 8: a run id that forges a log line, a run id with slashes, malformed gRPC
    messages and an agent name with a right-to-left override."""
    with (
        ctx.database("names") as url,
        ctx.sidecar(url, FAST, grpc=True) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as api,
    ):
        sent = api.post(
            "/v1/traces",
            content=named_run_body(EVIL_RUN, ["user", SPOOFED_AGENT]),
            headers=PROTOBUF_HEADERS,
        )
        slashed = api.post(
            "/v1/traces", content=named_run_body(SLASHED_RUN, ["writer"]), headers=PROTOBUF_HEADERS
        )
        evil = urllib.parse.quote(EVIL_RUN, safe="")
        _settled(api, f"/api/runs/{evil}")
        _settled(api, f"/api/runs/{urllib.parse.quote(SLASHED_RUN, safe='')}")
        log = sidecar.log()
        forged = [line for line in log.splitlines() if line.startswith(FORGED)]
        finding.add(
            "run id with a newline and a forged log line",
            ingest=sent.status_code,
            forged_lines_in_the_log=len(forged),
            id_logged_escaped="run-7\\n2026-01-01" in log,
        )
        finding.check("no forged line in the log", sent.status_code == 200 and not forged)
        _slashed(finding, api, slashed.status_code)
        _grpc(ctx, finding, sidecar.grpc_target or "", sidecar.log)
        pages = {"/ui/": "/ui/", "/ui/runs/{id}": f"/ui/runs/{evil}"}
        for name, page in pages.items():
            answer = api.get(page)
            finding.add(
                f"agent {SPOOFED_AGENT.encode('unicode_escape').decode()} on {name}",
                status=answer.status_code,
                shown_as_text="[U+202E]tnega-yrtne" in answer.text,
                raw_override_in_html="\u202e" in answer.text,
            )
            finding.check(
                f"{name} shows the override as [U+202E], never raw",
                answer.status_code == 200
                and "[U+202E]tnega-yrtne" in answer.text
                and "\u202e" not in answer.text,
            )


def _slashed(finding: Finding, api: httpx.Client, ingest: int) -> None:
    encoded = urllib.parse.quote(SLASHED_RUN, safe="")
    detail = api.get(f"/api/runs/{encoded}")
    page = api.get(f"/ui/runs/{encoded}")
    bare = api.get(f"/api/runs/{SLASHED_RUN}")
    finding.add(
        f"run id {SLASHED_RUN!r}",
        ingest=ingest,
        **{
            f"GET /api/runs/{encoded}": detail.status_code,
            f"GET /ui/runs/{encoded}": page.status_code,
            f"GET /api/runs/{SLASHED_RUN} (not encoded)": bare.status_code,
        },
    )
    finding.check(
        "a run id with '/' opens URL-encoded",
        detail.status_code == 200
        and detail.json().get("id") == SLASHED_RUN
        and page.status_code == 200,
    )


def _grpc(ctx: DrillContext, finding: Finding, target: str, log: Any) -> None:
    messages = _malformed(ctx.scale.malformed_grpc)
    tracebacks = log().count("Traceback")
    codes: Counter[str] = Counter()
    with grpc.insecure_channel(target) as channel:
        export = channel.unary_unary(GRPC_EXPORT)
        for message in messages:
            try:
                export(message, timeout=10)
                codes["OK"] += 1
            except grpc.RpcError as error:
                codes[error.code().name] += 1
        try:
            export(ExportTraceServiceRequest().SerializeToString(), timeout=10)
            valid = "OK"
        except grpc.RpcError as error:
            valid = error.code().name
    time.sleep(0.5)
    new_tracebacks = log().count("Traceback") - tracebacks
    finding.add(
        f"{len(messages)} malformed gRPC messages",
        codes=dict(codes),
        tracebacks_logged=new_tracebacks,
        a_valid_request_then=valid,
    )
    finding.check(
        "malformed gRPC messages: INVALID_ARGUMENT, no traceback",
        set(codes) == {"INVALID_ARGUMENT"} and new_tracebacks == 0 and valid == "OK",
    )
