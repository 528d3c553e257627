"""GenAI events sent as OTLP log records, by the OpenTelemetry SDK's own log exporters
over HTTP and gRPC, reach a running sidecar (SQLite and PostgreSQL) and give the model
calls they name their messages; a service's other logs are accepted and not kept."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogs
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from faultfinder import conventions as c
from tests.integration.sidecar import Sidecar, running_sidecar

PROJECT = "log-events"


@pytest.fixture
def sidecar(database_url: str, tmp_path: Path) -> Iterator[Sidecar]:
    with running_sidecar(database_url, tmp_path, FAULTFINDER_QUIET_PERIOD="1.0") as running:
        yield running


def _call_with_logged_messages(sidecar: Sidecar, logs: Any, run_id: str | None = None) -> str:
    """One model call traced over OTLP/HTTP, its messages logged through `logs` (a log
    exporter), with a service log beside them; the call's run id (`run_id`, set as the
    span's `faultfinder.run.id`, else its trace id)."""
    resource = Resource.create({"service.name": "shop", c.PROJECT_NAME: PROJECT})
    spans = TracerProvider(resource=resource)
    spans.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{sidecar.url}/v1/traces"))
    )
    records = LoggerProvider(resource=resource)
    records.add_log_record_processor(SimpleLogRecordProcessor(logs))
    logger = records.get_logger("genai")
    attributes = {c.GEN_AI_OPERATION_NAME: c.OP_CHAT} | ({c.RUN_ID: run_id} if run_id else {})
    with spans.get_tracer("app").start_as_current_span(
        "chat gpt-4o", attributes=attributes
    ) as span:
        here = trace.set_span_in_context(span)
        logger.emit(
            LogRecord(
                event_name="gen_ai.user.message",
                body={"content": "How many people live in Lyon?"},
                context=here,
            )
        )
        logger.emit(LogRecord(body="cache miss for lyon", context=here))
        logger.emit(
            LogRecord(
                event_name="gen_ai.choice",
                body={
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "Lyon has 522,250 inhabitants."},
                },
                context=here,
            )
        )
        trace_id = format(span.get_span_context().trace_id, "032x")
    records.shutdown()
    spans.shutdown()
    return run_id or trace_id


@pytest.mark.parametrize(
    ("transport", "keyed_by"), [("http", "trace"), ("grpc", "trace"), ("http", "run id")]
)
def test_logged_messages_give_the_model_call_its_text(
    sidecar: Sidecar, transport: str, keyed_by: str
) -> None:
    """Log records name their span by trace and span id only: a run keyed otherwise (its
    spans' `faultfinder.run.id`) gets them all the same."""
    logs = (
        HttpLogs(endpoint=f"{sidecar.url}/v1/logs")
        if transport == "http"
        else GrpcLogs(endpoint=f"http://{sidecar.grpc_endpoint}", insecure=True)
    )
    run_id = _call_with_logged_messages(
        sidecar, logs, run_id="order-42" if keyed_by == "run id" else None
    )
    with httpx.Client(base_url=sidecar.url, timeout=30) as client:
        deadline = time.monotonic() + 60
        while True:
            answer = client.get(f"/api/runs/{run_id}")
            if answer.status_code == 200 and answer.json()["status"] == "complete":
                break
            assert time.monotonic() < deadline, answer.text
            time.sleep(0.2)
        run = answer.json()
        # One run (the carrier of the logged events opens none), one step, its words.
        listed = client.get("/api/runs", params={"project": PROJECT}).json()["items"]
        assert [item["id"] for item in listed] == [run_id]
        steps = run["trajectory"]["steps"]
        assert [(s["kind"], s["content"]) for s in steps] == [
            ("llm", "Lyon has 522,250 inhabitants.")
        ]
        assert run["trajectory"]["task"] == "How many people live in Lyon?"
        # The service's own log line is nowhere.
        assert "cache miss" not in answer.text
