"""The attribution service end to end: failed runs get attributions from durable jobs."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan

from faultfinder import conventions as c
from faultfinder.attributors.model import Trajectory
from faultfinder.server.webhooks import SIGNATURE_HEADER, verify
from tests.integration.sidecar import Sidecar, running_sidecar, running_worker
from tests.llm_server import running_local_model
from tests.otlp_helpers import MS, T0, SpanRecorder, export_request, output_messages, protobuf_body

PROTOBUF = {"content-type": "application/x-protobuf"}
FAST = {"FAULTFINDER_QUIET_PERIOD": "0.3", "FAULTFINDER_SWEEP_INTERVAL": "0.2"}


def agent_run(*, failed: bool, marker: str = "") -> tuple[ReadableSpan, ...]:
    """A three-agent run as an instrumented program sends it: the coder's tool call fails
    (step 3), so the heuristic blames the coder's own decision before it (step 2)."""
    recorder = SpanRecorder({c.SERVICE_NAME: "travel-agents"})
    root = recorder.tracer.start_span(
        "invoke_workflow plan-trip",
        start_time=T0,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_WORKFLOW,
            c.RUN_TASK: f"Plan a trip {marker}",
        },
    )
    steps = [
        ("Planner", c.OP_INVOKE_AGENT, "Book the cheapest flight to Oslo, then a hotel.", None),
        ("Searcher", c.OP_INVOKE_AGENT, "Cheapest flight found: 1200 EUR with SAS.", None),
        ("Coder", c.OP_INVOKE_AGENT, "I parse the hotel list by its 'price' key.", None),
        ("Coder", c.OP_EXECUTE_TOOL, "Traceback: KeyError 'price' in the hotel list", "KeyError"),
        ("Planner", c.OP_INVOKE_AGENT, "Final answer: flight 1200 EUR, no hotel.", None),
    ]  # fmt: skip
    for index, (agent, operation, text, error) in enumerate(steps):
        attributes = {
            c.GEN_AI_OPERATION_NAME: operation,
            c.GEN_AI_AGENT_NAME: agent,
            c.GEN_AI_OUTPUT_MESSAGES: output_messages(text),
        }
        if operation == c.OP_EXECUTE_TOOL:
            attributes |= {c.GEN_AI_TOOL_NAME: "parse_hotels", c.GEN_AI_TOOL_CALL_RESULT: text}
        start = T0 + (index + 1) * 10 * MS
        recorder.span(f"{operation} {agent}", parent=root, start=start, end=start + 5 * MS,
                      attributes=attributes, error=error)  # fmt: skip
    if failed:
        root.set_status(trace.Status(trace.StatusCode.ERROR, "wrong answer"))
    root.end(end_time=T0 + 100 * MS)
    return recorder.spans


def run_id_of(spans: tuple[ReadableSpan, ...]) -> str:
    return f"{spans[0].context.trace_id:032x}"


def wait_for(check: Callable[[], Any], *, timeout: float = 60, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def send(client: httpx.Client, spans: tuple[ReadableSpan, ...], **headers: str) -> httpx.Response:
    return client.post("/v1/traces", content=protobuf_body(spans), headers=PROTOBUF | headers)


def attributions(
    client: httpx.Client, run_id: str, methods: set[str]
) -> list[dict[str, Any]] | None:
    run = client.get(f"/api/runs/{run_id}").json()
    done = [a for a in run["attributions"] if a["method"] in methods]
    return done if {a["method"] for a in done} == methods else None


@dataclass
class Received:
    url: str
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)


@contextmanager
def webhook_receiver() -> Iterator[Received]:
    """A real HTTP server on loopback that records what is POSTed to it."""
    received = Received(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            received.requests.append((self.path, dict(self.headers), body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    received.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_local_model("smollm2", tmp_path_factory.mktemp("llm")) as server:
        yield server.base_url


def test_a_failing_instrumented_run_gets_heuristic_and_llm_attributions(
    database_url: str, tmp_path: Path, small_model: str
) -> None:
    env = FAST | {
        "FAULTFINDER_ATTRIBUTORS": "first_error,all_at_once",
        "FAULTFINDER_LLM_BASE_URL": small_model,
        "FAULTFINDER_LLM_MODEL": "local",
    }
    spans = agent_run(failed=True)
    with (
        running_sidecar(database_url, tmp_path, **env) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=60) as client,
    ):
        assert send(client, spans).status_code == 200
        run_id = run_id_of(spans)
        found = wait_for(
            lambda: attributions(client, run_id, {"first_error", "all_at_once"}),
            timeout=240,
            what="both attributions",
        )
        run = client.get(f"/api/runs/{run_id}").json()
        assert run["status"] == "attributed"
        trajectory = Trajectory.model_validate(run["trajectory"])
        assert trajectory.agents == ("Planner", "Searcher", "Coder")
        for attribution in found:
            assert attribution["status"] == "ok", attribution
            assert 0 <= attribution["step"] < len(trajectory)
            assert attribution["agent"] in trajectory.agents
        heuristic = next(a for a in found if a["method"] == "first_error")
        assert (heuristic["agent"], heuristic["step"]) == ("Coder", 2)  # the failing tool call
        llm = next(a for a in found if a["method"] == "all_at_once")
        assert llm["llm_calls"] >= 1 and llm["prompt_tokens"] > 0


def test_a_graders_failure_verdict_on_an_ok_run_triggers_attribution(
    database_url: str, tmp_path: Path
) -> None:
    spans = agent_run(failed=False)
    probe = {
        "FAULTFINDER_ATTRIBUTORS": "first_error,echo",
        "FAULTFINDER_PLUGINS": "tests.plugins.echo",
    }
    with (
        running_sidecar(database_url, tmp_path, **(FAST | probe)) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as client,
    ):
        assert send(client, spans).status_code == 200
        run_id = run_id_of(spans)
        wait_for(lambda: client.get(f"/api/runs/{run_id}").json()["status"] == "complete",
                 what="the run to complete")  # fmt: skip
        time.sleep(1)  # a complete, successful-looking run is not attributed
        assert client.get(f"/api/runs/{run_id}").json()["attributions"] == []
        verdict = client.post(
            f"/api/runs/{run_id}/outcome",
            json={"outcome": "failure", "reason": "graded wrong", "ground_truth": "1150 EUR"},
        )
        assert verdict.status_code == 200
        # The verdict fails the run at once, not at the next sweep.
        assert verdict.json()["status"] in ("failed", "attributed")
        found = wait_for(
            lambda: attributions(client, run_id, {"first_error", "echo"}), what="attribution"
        )
        assert all(attribution["status"] == "ok" for attribution in found)
        run = client.get(f"/api/runs/{run_id}").json()
        assert run["status"] == "attributed"
        assert run["trajectory"]["ground_truth"] == "1150 EUR"
        # The attributors were handed the trajectory the API shows, ground truth included.
        (echoed,) = [a["details"] for a in found if a["method"] == "echo"]
        assert echoed["ground_truth"] == "1150 EUR"
        assert echoed["task"] == run["trajectory"]["task"]
        # Bad verdicts are refused with the field named; unknown runs are 404.
        bad = client.post(f"/api/runs/{run_id}/outcome", json={"outcome": "meh"})
        assert bad.status_code == 400 and "outcome" in bad.text
        assert client.post("/api/runs/nope/outcome", json={"outcome": "failure"}).status_code == 404


def test_two_workers_on_postgresql_never_run_a_job_twice(
    postgres_database_url: str, tmp_path: Path
) -> None:
    executions = tmp_path / "executions.txt"
    env = FAST | {
        "FAULTFINDER_ATTRIBUTORS": "counting",
        "FAULTFINDER_PLUGINS": "tests.plugins.counting",
        "FAULTFINDER_TEST_EXECUTIONS": str(executions),
        "FAULTFINDER_TEST_SLEEP": "0.05",
    }
    runs = [agent_run(failed=True, marker=str(i)) for i in range(80)]
    with running_sidecar(
        postgres_database_url, tmp_path, FAULTFINDER_WORKERS="0", **env
    ) as sidecar, running_worker(postgres_database_url, tmp_path, FAULTFINDER_WORKERS="3", **env), \
             running_worker(postgres_database_url, tmp_path, FAULTFINDER_WORKERS="3", **env), \
             httpx.Client(base_url=sidecar.url, timeout=30) as client:  # fmt: skip
        for spans in runs:
            assert send(client, spans).status_code == 200
        wait_for(
            lambda: client.get("/api/stats").json()["runs_by_status"]["attributed"] == len(runs),
            timeout=120,
            what="every run attributed",
        )
    lines = executions.read_text().split()
    run_ids = Counter(lines[0::2])
    assert set(run_ids) == {run_id_of(spans) for spans in runs}
    assert max(run_ids.values()) == 1  # each job ran exactly once
    assert len(set(lines[1::2])) == 2  # and both workers took part


def _job_running(client: httpx.Client, run_id: str) -> bool:
    """Whether the run's attribution job runs (any other answer, e.g. a run not stored
    yet: not yet)."""
    answer = client.get(f"/api/runs/{run_id}/jobs")
    return answer.status_code == 200 and any(job["status"] == "running" for job in answer.json())


def test_a_worker_killed_mid_job_is_replaced_and_the_job_finishes(
    database_url: str, tmp_path: Path
) -> None:
    executions = tmp_path / "executions.txt"
    env = FAST | {
        "FAULTFINDER_ATTRIBUTORS": "counting",
        "FAULTFINDER_PLUGINS": "tests.plugins.counting",
        "FAULTFINDER_TEST_EXECUTIONS": str(executions),
        "FAULTFINDER_JOB_LEASE": "2",
    }
    spans = agent_run(failed=True)
    run_id = run_id_of(spans)
    with running_sidecar(database_url, tmp_path, FAULTFINDER_WORKERS="0", **env) as sidecar, \
         httpx.Client(base_url=sidecar.url, timeout=30) as client:  # fmt: skip
        with running_worker(database_url, tmp_path, FAULTFINDER_TEST_SLEEP="30", **env) as doomed:
            assert send(client, spans).status_code == 200
            wait_for(lambda: _job_running(client, run_id), what="the job to start")
            doomed.send_signal(signal.SIGKILL)
            doomed.wait()
        assert not executions.exists()  # it died before finishing
        with running_worker(database_url, tmp_path, FAULTFINDER_TEST_SLEEP="0", **env):
            found = wait_for(
                lambda: attributions(client, run_id, {"counting"}), what="the retried job"
            )
        assert found[0]["status"] == "ok"
        (job,) = client.get(f"/api/runs/{run_id}/jobs").json()
        assert job["status"] == "done" and job["attempts"] == 2
    assert executions.read_text().count(run_id) == 1


def test_api_keys_guard_ingest_and_queries(sqlite_database_url: str, tmp_path: Path) -> None:
    env = {"FAULTFINDER_API_KEYS": "query-key-1", "FAULTFINDER_INGEST_KEYS": "ingest-key-1"}
    spans = agent_run(failed=True)
    with (
        running_sidecar(sqlite_database_url, tmp_path, **env) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as client,
    ):
        assert send(client, spans).status_code == 401
        assert send(client, spans, authorization="Bearer wrong").status_code == 401
        assert client.get("/api/runs").status_code == 401
        assert client.get("/api/runs", headers={"authorization": "Bearer wrong"}).status_code == 401
        # An ingest key may send spans but not read runs; an API key may do both.
        assert (
            client.get("/api/runs", headers={"authorization": "Bearer ingest-key-1"}).status_code
            == 401
        )
        assert send(client, spans, authorization="Bearer ingest-key-1").status_code == 200
        assert send(client, spans, **{"x-api-key": "query-key-1"}).status_code == 200
        listed = client.get("/api/runs", headers={"authorization": "Bearer query-key-1"})
        assert listed.status_code == 200 and len(listed.json()["items"]) == 1
        assert client.get("/healthz").status_code == 200  # probes stay open
        # gRPC: the same keys in the metadata.
        request = export_request(agent_run(failed=True))
        with grpc.insecure_channel(sidecar.grpc_endpoint) as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
            for metadata in ((), (("authorization", "Bearer wrong"),)):
                with pytest.raises(grpc.RpcError) as refused:
                    stub.Export(request, metadata=metadata, timeout=10)
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            answer = stub.Export(
                request, metadata=(("authorization", "Bearer ingest-key-1"),), timeout=10
            )
            assert isinstance(answer, trace_service_pb2.ExportTraceServiceResponse)


def test_webhook_receives_signed_attributions_and_labels_feed_live_accuracy(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    with webhook_receiver() as received:
        env = FAST | {
            "FAULTFINDER_WEBHOOK_URLS": f"{received.url}/hook",
            "FAULTFINDER_WEBHOOK_SECRET": "s3cret",
        }
        spans = agent_run(failed=True)
        run_id = run_id_of(spans)
        with (
            running_sidecar(sqlite_database_url, tmp_path, **env) as sidecar,
            httpx.Client(base_url=sidecar.url, timeout=30) as client,
        ):
            assert send(client, spans).status_code == 200
            wait_for(lambda: attributions(client, run_id, {"first_error"}), what="attribution")
            path, headers, body = wait_for(lambda: received.requests, what="the webhook")[0]
            assert path == "/hook"
            assert verify(body, "s3cret", headers[SIGNATURE_HEADER])
            assert json.loads(body)["data"]["run_id"] == run_id
            # A human label; the attributor's live accuracy is measured against it.
            bad_label = client.post(
                f"/api/runs/{run_id}/labels", json={"agent": "Nobody", "step": 1}
            )
            assert bad_label.status_code == 400 and "agent" in bad_label.text
            out_of_range = client.post(
                f"/api/runs/{run_id}/labels", json={"agent": "Coder", "step": 99}
            )
            assert out_of_range.status_code == 400 and "step" in out_of_range.text
            label = client.post(f"/api/runs/{run_id}/labels", json={"agent": "Coder", "step": 2})
            assert label.status_code == 201
            stats = client.get("/api/stats").json()
            # One row per default attributor (learned, first_error), each over the one label.
            accuracy = {row["method"]: row for row in stats["accuracy"]}
            assert set(accuracy) == {"learned", "first_error"}
            assert all(row["labelled_runs"] == 1 for row in accuracy.values())
            heuristic = accuracy["first_error"]
            assert (heuristic["agent_accuracy"], heuristic["step_accuracy"]) == (1.0, 1.0)
            # Blame is one vote per run: the leading attributor's (learned's) agent.
            run = client.get(f"/api/runs/{run_id}").json()
            (leading,) = [a["agent"] for a in run["attributions"] if a["method"] == "learned"]
            assert stats["blame_by_agent"] == {leading: 1}


def test_ad_hoc_trajectories_are_attributed_synchronously(sidecar_sqlite: Sidecar) -> None:
    trajectory = {
        "run_id": "adhoc-1",
        "task": "Add 2 and 2",
        "steps": [
            {"index": 0, "agent": "Solver", "content": "I will compute it."},
            {
                "index": 1,
                "agent": "Calculator",
                "kind": "tool",
                "content": "Error: division by zero",
            },
            {"index": 2, "agent": "Solver", "content": "The answer is 5."},
        ],
    }
    with httpx.Client(base_url=sidecar_sqlite.url, timeout=30) as client:
        answer = client.post(
            "/api/attribute", json={"trajectory": trajectory, "attributor": "first_error"}
        )
        assert answer.status_code == 200, answer.text
        attribution = answer.json()["attribution"]
        assert (attribution["agent"], attribution["step"]) == ("Solver", 0)
        queued = client.post(
            "/api/attribute",
            json={"trajectory": trajectory, "attributor": "first_error", "wait": False},
        )
        assert queued.status_code == 202
        job_id = queued.json()["id"]
        done = wait_for(
            lambda: (j := client.get(f"/api/jobs/{job_id}").json())["status"] == "done" and j,
            what="the ad-hoc job",
        )
        assert done["attribution"]["step"] == 0
        unknown = client.post(
            "/api/attribute", json={"trajectory": trajectory, "attributor": "nope"}
        )
        assert unknown.status_code == 400 and "attributor" in unknown.text
        broken = dict(trajectory, steps=[{"index": 3, "agent": "x"}])
        assert client.post("/api/attribute", json={"trajectory": broken}).status_code == 400


def test_an_ad_hoc_trajectory_over_the_step_limit_is_refused_and_one_within_it_answered(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    limit = 300

    def trajectory(steps: int) -> dict[str, object]:
        return {
            "run_id": f"long-{steps}",
            "task": "Add 2 and 2",
            "steps": [
                {"index": i, "agent": f"agent-{i % 3}", "content": f"turn {i}: still working"}
                for i in range(steps)
            ],
        }

    env = {**FAST, "FAULTFINDER_MAX_ATTRIBUTION_STEPS": str(limit)}
    with (
        running_sidecar(sqlite_database_url, tmp_path, **env) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=60) as client,
    ):
        over = client.post("/api/attribute", json={"trajectory": trajectory(limit + 1)})
        assert over.status_code == 413
        assert f"{limit + 1} steps" in over.text
        for attributor in ("learned", "first_error"):  # both run off the event loop
            within = client.post(
                "/api/attribute",
                json={"trajectory": trajectory(limit), "attributor": attributor},
            )
            assert within.status_code == 200, within.text
            answer = within.json()["attribution"]
            assert answer["status"] == "ok" and 0 <= answer["step"] < limit
        assert client.get("/readyz").status_code == 200


@pytest.fixture
def sidecar_sqlite(sqlite_database_url: str, tmp_path: Path) -> Iterator[Sidecar]:
    with running_sidecar(sqlite_database_url, tmp_path, **FAST) as sidecar:
        yield sidecar
