"""Runs whose root span never arrives: a process killed mid-run is a failure, a request
continuing another process's trace is not, and a sender that says nothing about its
spans' parents keeps the quiet-period rule."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from faultfinder import conventions as c
from tests.integration.sidecar import quick_sidecar
from tests.otlp_helpers import MS, T0, SpanRecorder, export_request, output_messages

PROTOBUF = {"content-type": "application/x-protobuf"}

# An agent program that exports its finished spans, then is killed before its workflow's
# span ends: what an out-of-memory kill, a SIGKILL or an unhandled crash in a framework
# that does not end its spans leaves behind.
KILLED_MID_RUN = textwrap.dedent(
    """
    import os, signal, sys
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "killed-agents"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[1])))
    tracer = provider.get_tracer("agents")
    workflow = tracer.start_span("invoke_workflow census",
                                 attributes={"gen_ai.operation.name": "invoke_workflow"})
    with trace.use_span(workflow):
        for agent, text in (("Researcher", "I look the population up."),
                            ("Writer", "I draft the report from what was found.")):
            with tracer.start_as_current_span(
                f"invoke_agent {agent}",
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                            "gen_ai.output.messages": '[{"role": "assistant", "parts": '
                            '[{"type": "text", "content": "%s"}]}]' % text}):
                pass
    provider.force_flush()
    print("exported", format(workflow.get_span_context().trace_id, "032x"), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def wait_for_status(client: httpx.Client, run_id: str, statuses: set[str]) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while True:
        response = client.get(f"/api/runs/{run_id}")
        if response.status_code == 200 and response.json()["status"] in statuses:
            run: dict[str, object] = response.json()
            return run
        assert time.monotonic() < deadline, f"run {run_id} never reached {statuses}"
        time.sleep(0.1)


def attribution_by(client: httpx.Client, run_id: str, method: str) -> dict[str, Any] | None:
    run = client.get(f"/api/runs/{run_id}").json()
    found = [a for a in run["attributions"] if a["method"] == method]
    return found[0] if found else None


def test_a_process_killed_mid_run_fails_its_run_as_unfinished(tmp_path: Path) -> None:
    with (
        quick_sidecar(tmp_path, FAULTFINDER_UNFINISHED_AFTER="3") as sidecar,
        httpx.Client(base_url=sidecar.url) as client,
    ):
        agent = subprocess.run(
            [sys.executable, "-c", KILLED_MID_RUN, f"{sidecar.url}/v1/traces"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert agent.returncode == -9, agent.stderr
        run_id = agent.stdout.split()[-1]
        killed_at = time.monotonic()
        # Past the quiet period (0.3 s) the run is still open: its root may yet come.
        time.sleep(1.5)
        assert client.get(f"/api/runs/{run_id}").json()["status"] == "running"

        run = wait_for_status(client, run_id, {"failed", "attributed"})
        assert time.monotonic() - killed_at >= 3 - 0.5
        assert run["unfinished"] is True
        assert sorted(run["agents"]) == ["Researcher", "Writer"]  # type: ignore[call-overload]
        listed = client.get("/api/runs").json()["items"]
        assert [r["unfinished"] for r in listed if r["id"] == run_id] == [True]
        page = client.get(f"/ui/runs/{run_id}").text
        assert "unfinished: its root span never arrived" in page
        assert "faultfinder_runs_unfinished 1.0" in client.get("/metrics").text

        # No step shows an error: both default attributors blame where the work stopped,
        # and say why; not the guess of the first acting step.
        for method in ("learned", "first_error"):
            deadline = time.monotonic() + 60
            while not (answer := attribution_by(client, run_id, method)):
                assert time.monotonic() < deadline, f"{method} never answered"
                time.sleep(0.2)
            assert (answer["agent"], answer["step"]) == ("Writer", 1), answer
            assert "never finished" in answer["reason"], answer


def request_continuing_a_trace() -> SpanRecorder:
    """A service's request span whose parent is in the calling process (a `traceparent`
    header), and an agent's turn inside it."""
    recorder = SpanRecorder({c.SERVICE_NAME: "agent-service"})
    caller = TraceContextTextMapPropagator().extract(
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    )
    server = recorder.tracer.start_span(
        "POST /chat", context=caller, kind=trace.SpanKind.SERVER, start_time=T0
    )
    recorder.span(
        "invoke_agent Helper",
        parent=server,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT,
            c.GEN_AI_AGENT_NAME: "Helper",
            c.GEN_AI_OUTPUT_MESSAGES: output_messages("Your order ships tomorrow."),
        },
    )
    server.end(end_time=T0 + 3 * MS)
    return recorder


def test_a_request_continuing_another_process_trace_completes(tmp_path: Path) -> None:
    """Its root is the request's span (its parent is remote): the run completes once that
    has arrived and the spans are quiet, not after `unfinished_after`."""
    recorder = request_continuing_a_trace()
    body = export_request(recorder.spans).SerializeToString()
    with (
        quick_sidecar(tmp_path, FAULTFINDER_UNFINISHED_AFTER="600") as sidecar,
        httpx.Client(base_url=sidecar.url) as client,
    ):
        assert client.post("/v1/traces", content=body, headers=PROTOBUF).status_code == 200
        run = wait_for_status(client, "0af7651916cd43dd8448eb211c80319c", {"complete"})
        assert run["unfinished"] is False
        assert run["agents"] == ["Helper"]


def test_orphans_from_a_sender_that_does_not_say_where_parents_are_complete_when_quiet(
    tmp_path: Path,
) -> None:
    """A sender without OTLP span flags (older SDKs, some other languages): a run with no
    root is settled after the quiet period, as before span flags were read."""
    recorder = request_continuing_a_trace()
    child = [span for span in recorder.spans if span.name == "invoke_agent Helper"]
    request = export_request(child)
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                assert span.flags & 0x100  # the SDK says where the parent is ...
                span.flags = 0  # ... this sender does not
    with (
        quick_sidecar(tmp_path, FAULTFINDER_UNFINISHED_AFTER="600") as sidecar,
        httpx.Client(base_url=sidecar.url) as client,
    ):
        body = request.SerializeToString()
        assert client.post("/v1/traces", content=body, headers=PROTOBUF).status_code == 200
        run = wait_for_status(client, "0af7651916cd43dd8448eb211c80319c", {"complete"})
        assert run["unfinished"] is False
