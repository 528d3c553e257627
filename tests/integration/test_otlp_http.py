"""OTLP/HTTP against a running sidecar: bad bodies are refused cleanly, order does not matter."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import random
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from faultfinder.datasets import load_dataset
from faultfinder.reading.assembler import assemble_trajectory
from tests.integration.sidecar import Sidecar, running_sidecar
from tests.otlp_helpers import (
    export_request,
    framework_spans,
    json_body,
    protobuf_body,
    span_records,
    trajectory_spans,
)

PROTOBUF = {"content-type": "application/x-protobuf"}
GZIP = PROTOBUF | {"content-encoding": "gzip"}
JSON = {"content-type": "application/json"}
LIMIT = 1_000_000


@pytest.fixture
def sidecar(database_url: str, tmp_path: Path) -> Iterator[Sidecar]:
    with running_sidecar(
        database_url,
        tmp_path,
        FAULTFINDER_MAX_REQUEST_BYTES=str(LIMIT),
        FAULTFINDER_QUIET_PERIOD="60",
    ) as running:
        yield running


def stored_spans(client: httpx.Client) -> int:
    count: int = client.get("/api/stats/ingest").raise_for_status().json()["spans_stored"]
    return count


def test_bad_bodies_get_4xx_and_the_sidecar_keeps_serving(sidecar: Sidecar) -> None:
    spans = framework_spans()
    good = protobuf_body(spans)
    rng = random.Random(7)
    bad_requests = [
        ("random bytes", os.urandom(4096), PROTOBUF, 400),
        ("truncated protobuf", good[: len(good) // 2], PROTOBUF, 400),
        ("wrong JSON", b'{"resourceSpans": [{"scopeSpans": 5}', JSON, 400),
        ("JSON of the wrong shape", b'{"resourceSpans": "nope"}', JSON, 400),
        ("not JSON at all", bytes(rng.randrange(256) for _ in range(300)), JSON, 400),
        ("gzip header over garbage", b"\x1f\x8b\x08\x00garbage", GZIP, 400),
        ("unknown content encoding", good, PROTOBUF | {"content-encoding": "br"}, 400),
        ("huge body", b"\x00" * (LIMIT + 1), PROTOBUF, 413),
        ("gzip bomb", gzip.compress(b"\x00" * (70 * 1024 * 1024)), GZIP, 413),
        ("wrong content type", good, {"content-type": "text/plain"}, 415),
        ("no content type", good, {}, 415),
    ]  # fmt: skip
    with httpx.Client(base_url=sidecar.url, timeout=30) as client:
        before = stored_spans(client)
        for what, body, headers, expected in bad_requests:
            response = client.post("/v1/traces", content=body, headers=headers)
            assert response.status_code == expected, (what, response.status_code, response.text)
            assert client.get("/healthz").status_code == 200, what
        assert stored_spans(client) == before  # nothing half-stored from a refused body
        # A 400 says why, in the request's own encoding (google.rpc.Status as JSON here).
        refused = client.post("/v1/traces", content=b"[1, 2", headers=JSON)
        assert refused.status_code == 400
        assert "decode" in refused.json()["message"]

        accepted = client.post("/v1/traces", content=good, headers=PROTOBUF)
        assert accepted.status_code == 200
        assert accepted.headers["content-type"].startswith("application/x-protobuf")
        ExportTraceServiceResponse.FromString(accepted.content)  # a valid response message
        assert stored_spans(client) == before + len(spans)
    assert sidecar.process.poll() is None


def test_gzip_deflate_and_json_bodies_are_accepted(sidecar: Sidecar) -> None:
    bodies = [
        (gzip.compress(protobuf_body(framework_spans())), GZIP),
        (
            zlib.compress(protobuf_body(framework_spans())),
            PROTOBUF | {"content-encoding": "deflate"},
        ),
        (json_body(framework_spans()), JSON),
    ]
    with httpx.Client(base_url=sidecar.url, timeout=30) as client:
        for body, headers in bodies:
            response = client.post("/v1/traces", content=body, headers=headers)
            assert response.status_code == 200, response.text
        # JSON requests get a JSON ExportTraceServiceResponse.
        assert response.headers["content-type"].startswith("application/json")
        json_format.Parse(response.content, ExportTraceServiceResponse())
        assert stored_spans(client) == 3 * len(framework_spans())
        runs = client.get("/api/runs").raise_for_status().json()["items"]
        assert len(runs) == 3
        assert {run["n_steps"] for run in runs} == {4}


def test_invalid_spans_are_counted_as_partial_success(sidecar: Sidecar) -> None:
    request = export_request(framework_spans())
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].span_id = b"\x01\x02"  # not 8 bytes: this one span is invalid
    with httpx.Client(base_url=sidecar.url, timeout=30) as client:
        response = client.post("/v1/traces", content=request.SerializeToString(), headers=PROTOBUF)
        assert response.status_code == 200
        answer = ExportTraceServiceResponse.FromString(response.content)
        assert answer.partial_success.rejected_spans == 1
        assert answer.partial_success.error_message
        assert stored_spans(client) == len(spans) - 1
        stats = client.get("/api/stats/ingest").json()
        assert sum(stats["spans_rejected"].values()) == 1


def test_spans_sent_shuffled_across_requests_assemble_into_the_same_trajectory(
    sidecar: Sidecar,
) -> None:
    record = next(r for r in load_dataset("who_and_when:hand-crafted") if len(r.trajectory) > 20)
    traces = [framework_spans(), trajectory_spans(record.trajectory)]
    rng = random.Random(3)
    with httpx.Client(base_url=sidecar.url, timeout=30) as client:
        for spans in traces:
            shuffled = list(spans)
            rng.shuffle(shuffled)
            # Children first: the root (no parent) goes last, in its own request.
            shuffled.sort(key=lambda span: span.parent is None)
            for start in range(0, len(shuffled), 3):
                chunk = shuffled[start : start + 3]
                response = client.post("/v1/traces", content=protobuf_body(chunk), headers=PROTOBUF)
                assert response.status_code == 200
            run_id = f"{spans[0].context.trace_id:032x}"
            expected = assemble_trajectory(run_id, span_records(spans))
            got = client.get(f"/api/runs/{run_id}").raise_for_status().json()["trajectory"]
            assert [(s["agent"], s["kind"], s["content"]) for s in got["steps"]] == [
                (s.agent, s.kind.value, s.content) for s in expected.steps
            ]
            assert got["task"] == expected.task
        # The Who&When record keeps the dataset's own step indices and agents.
        assert [s["agent"] for s in got["steps"]] == [s.agent for s in record.trajectory.steps]


def test_unknown_run_is_404_and_bad_query_is_400(sidecar: Sidecar) -> None:
    with httpx.Client(base_url=sidecar.url, timeout=30) as client:
        missing = client.get("/api/runs/does-not-exist")
        assert missing.status_code == 404
        assert missing.headers["content-type"].startswith("application/problem+json")
        assert client.get("/api/runs", params={"status": "exploded"}).status_code == 400
        assert client.get("/api/runs", params={"cursor": "%%%not-a-cursor"}).status_code == 400
        assert client.get("/api/runs", params={"limit": 0}).status_code == 400


def test_json_request_body_is_equivalent_to_protobuf(sidecar: Sidecar) -> None:
    spans = framework_spans()
    request = ExportTraceServiceRequest.FromString(protobuf_body(spans))
    assert json.loads(json_body(spans))["resourceSpans"]  # hex-id OTLP/JSON, as exporters send
    with httpx.Client(base_url=sidecar.url, timeout=30) as client:
        assert client.post("/v1/traces", content=json_body(spans), headers=JSON).status_code == 200
        run_id = request.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()
        steps = client.get(f"/api/runs/{run_id}").raise_for_status().json()["trajectory"]["steps"]
        assert [s["agent"] for s in steps] == [
            "Orchestrator",
            "WebSurfer",
            "WebSurfer",
            "Orchestrator",
        ]


def test_project_comes_from_the_header_or_the_resource(sidecar: Sidecar) -> None:
    from faultfinder.conventions import PROJECT_NAME

    with httpx.Client(base_url=sidecar.url, timeout=30) as client:
        by_header = client.post(
            "/v1/traces",
            content=protobuf_body(framework_spans({PROJECT_NAME: "ignored"})),
            headers=PROTOBUF | {"x-project-name": "checkout"},
        )
        by_resource = client.post(
            "/v1/traces",
            content=protobuf_body(framework_spans({PROJECT_NAME: "search"})),
            headers=PROTOBUF,
        )
        anonymous = client.post(
            "/v1/traces", content=protobuf_body(framework_spans()), headers=PROTOBUF
        )
        assert {by_header.status_code, by_resource.status_code, anonymous.status_code} == {200}
        for project in ("checkout", "search", "default"):
            runs = client.get("/api/runs", params={"project": project}).json()["items"]
            assert [run["project"] for run in runs] == [project]


def test_a_connection_idle_between_batches_stays_open_for_the_next(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    """The OpenTelemetry SDK's batch processor exports every 5 s on one kept-alive
    connection. Were the sidecar to close connections idle for that long, every export could
    race its close and be lost in flight; the sidecar keeps them open longer (`keep_alive`)."""
    body = protobuf_body(framework_spans())
    with running_sidecar(sqlite_database_url, tmp_path) as running:
        address = urlsplit(running.url)
        connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=10)

        def export() -> tuple[str, int]:
            """Send one batch on the kept connection; the local end it went out from."""
            connection.request("POST", "/v1/traces", body=body, headers=PROTOBUF)
            answer = connection.getresponse()
            answer.read()
            assert answer.status == 200, answer.status
            local: tuple[str, int] = connection.sock.getsockname()
            return local

        try:
            first = export()
            time.sleep(6)  # the batch processor's 5 s, and some
            assert export() == first  # the same connection, not a new one
        finally:
            connection.close()
