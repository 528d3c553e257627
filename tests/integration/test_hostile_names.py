"""Names and bytes from hostile telemetry, on a real sidecar: a run id that tries to forge a
log line, an agent name with a right-to-left override, and a gRPC message that is not an
OTLP request."""

from __future__ import annotations

import time
import urllib.parse
from pathlib import Path

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from faultfinder.attributors.model import Step, StepKind, Trajectory
from tests.integration.sidecar import running_sidecar
from tests.otlp_helpers import protobuf_body, trajectory_spans

FAST = {"FAULTFINDER_QUIET_PERIOD": "0.3", "FAULTFINDER_SWEEP_INTERVAL": "0.2"}
FORGED = "2026-01-01 00:00:00,000 ERROR faultfinder.server: admin password reset"
EVIL_RUN = f"run-7\n{FORGED}"
SPOOFED_AGENT = "\u202etnega-yrtne"  # shows as "entry-agent" when the override applies
EXPORT = f"/{trace_service_pb2.DESCRIPTOR.services_by_name['TraceService'].full_name}/Export"


def _trajectory() -> Trajectory:
    steps = (
        Step(index=0, agent="user", kind=StepKind.HUMAN, content="Add 2 and 2."),
        Step(index=1, agent=SPOOFED_AGENT, kind=StepKind.MESSAGE, content="5"),
    )
    return Trajectory(run_id=EVIL_RUN, task="Add 2 and 2.", steps=steps)


def test_hostile_run_ids_and_agent_names_stay_inert_in_logs_and_pages(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    with (
        running_sidecar(sqlite_database_url, tmp_path, **FAST) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=10) as api,
    ):
        spans = trajectory_spans(_trajectory(), run_id=EVIL_RUN)
        sent = api.post(
            "/v1/traces",
            content=protobuf_body(spans),
            headers={"content-type": "application/x-protobuf"},
        )
        assert sent.status_code == 200
        deadline = time.monotonic() + 30
        while "is now" not in sidecar.log() and time.monotonic() < deadline:
            time.sleep(0.2)
        log = sidecar.log()
        assert "is now" in log, log
        # The run's id is in the log, escaped on its own record's line; no forged line.
        assert "run-7\\n2026-01-01" in log
        assert not any(line.startswith(FORGED) for line in log.splitlines())

        # The run is stored with its id as sent, and the pages show the override as text.
        items = api.get("/api/runs").json()["items"]
        assert [item["id"] for item in items] == [EVIL_RUN], items
        (run,) = items
        assert run["id"] == EVIL_RUN and SPOOFED_AGENT in run["agents"]
        for page in ("/ui/", f"/ui/runs/{urllib.parse.quote(EVIL_RUN, safe='')}"):
            html = api.get(page).text
            assert "[U+202E]tnega-yrtne" in html, page
            assert "\u202e" not in html, page


def test_a_grpc_message_that_is_not_an_otlp_request_is_an_invalid_argument(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    with (
        running_sidecar(sqlite_database_url, tmp_path) as sidecar,
        grpc.insecure_channel(sidecar.grpc_endpoint) as channel,
    ):
        export = channel.unary_unary(EXPORT)  # raw bytes in and out
        with pytest.raises(grpc.RpcError) as raised:
            export(b"\xff\xff\xff\xff", timeout=10)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "ExportTraceServiceRequest" in (raised.value.details() or "")
        # A well-formed request on the same channel is still answered.
        answer = export(trace_service_pb2.ExportTraceServiceRequest().SerializeToString())
        assert trace_service_pb2.ExportTraceServiceResponse.FromString(answer) is not None
        assert "Traceback" not in sidecar.log()


SLASHED_RUNS = ("team/a/run-1", "q?x=1#frag", "100% done", "../../etc/passwd")


def test_run_ids_with_any_characters_are_addressable_url_encoded(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    with (
        running_sidecar(sqlite_database_url, tmp_path, **FAST) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=10) as api,
    ):
        for run_id in SLASHED_RUNS:
            trajectory = _trajectory().model_copy(update={"run_id": run_id})
            sent = api.post(
                "/v1/traces",
                content=protobuf_body(trajectory_spans(trajectory, run_id=run_id)),
                headers={"content-type": "application/x-protobuf"},
            )
            assert sent.status_code == 200
        for run_id in SLASHED_RUNS:
            path = urllib.parse.quote(run_id, safe="")
            detail = api.get(f"/api/runs/{path}")
            assert detail.status_code == 200, (run_id, detail.text)
            assert detail.json()["id"] == run_id
            label = api.post(f"/api/runs/{path}/labels", json={"agent": "user", "step": 0})
            assert label.status_code == 201, (run_id, label.text)
            (stored,) = api.get(f"/api/runs/{path}/labels").json()
            assert stored["agent"] == "user"
            outcome = api.post(f"/api/runs/{path}/outcome", json={"outcome": "failure"})
            assert outcome.status_code == 200 and outcome.json()["id"] == run_id
            page = api.get(f"/ui/runs/{path}")
            assert page.status_code == 200, run_id
        # A near miss is a miss: the undecoded "team/a/run-1" is not that run, and the
        # labels went to the runs they name, not to a prefix of them.
        assert api.get("/api/runs/team/a/run-1").status_code == 404
        assert api.get(f"/api/runs/{urllib.parse.quote('team', safe='')}").status_code == 404
