"""OTLP/HTTP and OTLP/gRPC are two doors to one receiver: the same bad body, sent to a real
sidecar both ways, gets the same answer (the same status, said the same way)."""

from __future__ import annotations

from pathlib import Path

import grpc
import httpx
import pytest
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from faultfinder.attributors.model import Step, StepKind, Trajectory
from tests.integration.sidecar import Sidecar, running_sidecar
from tests.otlp_helpers import protobuf_body, trajectory_spans

TRACES = f"/{trace_service_pb2.DESCRIPTOR.services_by_name['TraceService'].full_name}/Export"
LOGS = f"/{logs_service_pb2.DESCRIPTOR.services_by_name['LogsService'].full_name}/Export"
HTTP_STATUS_OF = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 413,
}
"""What each gRPC status is on OTLP/HTTP (the OTLP specification's pairs)."""


def _three_spans() -> bytes:
    steps = tuple(
        Step(index=i, agent="planner", kind=StepKind.MESSAGE, content=f"step {i}") for i in range(3)
    )
    trajectory = Trajectory(run_id="run-1", task="Count to three.", steps=steps)
    return protobuf_body(trajectory_spans(trajectory, run_id="run-1"))


def _over_http(sidecar: Sidecar, path: str, body: bytes) -> tuple[int, status_pb2.Status]:
    answer = httpx.post(
        f"{sidecar.url}{path}",
        content=body,
        headers={"content-type": "application/x-protobuf"},
        timeout=10,
    )
    return answer.status_code, status_pb2.Status.FromString(answer.content)


def _over_grpc(sidecar: Sidecar, method: str, body: bytes) -> grpc.RpcError:
    with grpc.insecure_channel(sidecar.grpc_endpoint) as channel:
        export = channel.unary_unary(method)  # raw bytes in and out
        with pytest.raises(grpc.RpcError) as raised:
            export(body, timeout=10)
    return raised.value


@pytest.mark.parametrize(
    ("http_path", "grpc_method", "body", "expected"),
    [
        ("/v1/traces", TRACES, b"\xff\xff\xff\xff", grpc.StatusCode.INVALID_ARGUMENT),
        ("/v1/logs", LOGS, b"\xff\xff\xff\xff", grpc.StatusCode.INVALID_ARGUMENT),
        ("/v1/traces", TRACES, "three spans", grpc.StatusCode.RESOURCE_EXHAUSTED),
    ],
    ids=["undecodable-traces", "undecodable-logs", "too-many-spans"],
)
def test_a_bad_body_gets_the_same_answer_over_http_and_grpc(
    sqlite_database_url: str,
    tmp_path: Path,
    http_path: str,
    grpc_method: str,
    body: bytes | str,
    expected: grpc.StatusCode,
) -> None:
    data = _three_spans() if body == "three spans" else body
    assert isinstance(data, bytes)
    with running_sidecar(
        sqlite_database_url, tmp_path, FAULTFINDER_MAX_SPANS_PER_REQUEST="2"
    ) as sidecar:
        http_status, http_answer = _over_http(sidecar, http_path, data)
        grpc_error = _over_grpc(sidecar, grpc_method, data)

    assert grpc_error.code() == expected
    assert http_status == HTTP_STATUS_OF[expected]
    assert http_answer.code == expected.value[0]
    assert http_answer.message, "the answer says what was wrong"
    assert grpc_error.details() == http_answer.message
