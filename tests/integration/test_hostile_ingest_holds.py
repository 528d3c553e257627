"""No sender can hold ingest for the others on a real sidecar.

A request's declared length reserves nothing: the spans a body is estimated to carry count
against the queue limit as its bytes arrive. An upload that stops sending is dropped with
408 after `FAULTFINDER_BODY_PROGRESS_TIMEOUT` seconds without a byte, and what it held of
the in-flight byte limit is given back, long before the whole-body timeout.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import grpc
import httpx
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from faultfinder.attributors.model import Step, StepKind, Trajectory
from tests.integration.raw_http import answer_status, raw_upload
from tests.integration.sidecar import Sidecar, running_sidecar
from tests.otlp_helpers import protobuf_body, trajectory_spans

MIB = 1024 * 1024


def _export_body() -> bytes:
    steps = (Step(index=0, agent="writer", kind=StepKind.MESSAGE, content="4"),)
    return protobuf_body(trajectory_spans(Trajectory(run_id="r", task="t", steps=steps)))


def _http_statuses(sidecar: Sidecar, count: int) -> list[int]:
    with httpx.Client(timeout=30) as client:
        return [
            client.post(
                f"{sidecar.url}/v1/traces",
                content=_export_body(),
                headers={"content-type": "application/x-protobuf"},
            ).status_code
            for _ in range(count)
        ]


def _grpc_codes(sidecar: Sidecar, count: int) -> list[grpc.StatusCode]:
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(_export_body())
    codes = []
    with grpc.insecure_channel(sidecar.grpc_endpoint) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
        for _ in range(count):
            try:
                stub.Export(request, timeout=30)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as exc:
                codes.append(exc.code())
    return codes


def _rejected(sidecar: Sidecar) -> dict[str, int]:
    stats = httpx.get(f"{sidecar.url}/api/stats/ingest", timeout=10).json()
    rejected: dict[str, int] = stats["requests_rejected"]
    return rejected


def test_an_idle_connection_declaring_16_mib_refuses_no_other_export(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    # 16 MiB at the initial estimate of a span per 2,500 bytes is ~6,700 spans: over this
    # queue limit, so a reservation by declared length would refuse everyone else.
    env = {"FAULTFINDER_INGEST_QUEUE_SPANS": "5000", "FAULTFINDER_BODY_PROGRESS_TIMEOUT": "60"}
    with (
        running_sidecar(sqlite_database_url, tmp_path, **env) as sidecar,
        raw_upload(sidecar, f"Content-Length: {16 * MIB}\r\n") as idle,
    ):
        idle.sendall(b"\x0a")  # one byte of the 16 MiB it declared, and then nothing
        time.sleep(0.3)
        assert _http_statuses(sidecar, 20) == [200] * 20
        assert _grpc_codes(sidecar, 20) == [grpc.StatusCode.OK] * 20
        assert _rejected(sidecar) == {}


def test_a_stalled_upload_is_dropped_and_gives_back_the_inflight_bytes(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    env = {
        "FAULTFINDER_INGEST_INFLIGHT_BYTES": str(MIB),
        "FAULTFINDER_BODY_PROGRESS_TIMEOUT": "1",
        "FAULTFINDER_BODY_READ_TIMEOUT": "60",
    }
    with (
        running_sidecar(sqlite_database_url, tmp_path, **env) as sidecar,
        raw_upload(sidecar, f"Content-Length: {2 * MIB}\r\n") as stalled,
    ):
        stalled.sendall(b"\x00" * MIB)  # the whole in-flight limit, and then nothing
        time.sleep(0.3)
        # While it holds the limit, other exports are refused (and told to retry) ...
        assert _http_statuses(sidecar, 1) == [503]
        # ... until a second passes without a byte: the upload gets 408 and lets go.
        started = time.monotonic()
        assert answer_status(stalled) == 408
        assert time.monotonic() - started < 5
        assert _http_statuses(sidecar, 5) == [200] * 5
        assert _rejected(sidecar).get("body_stalled") == 1


def test_unfinished_chunked_uploads_are_dropped_by_the_progress_timeout(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    env = {"FAULTFINDER_BODY_PROGRESS_TIMEOUT": "1", "FAULTFINDER_BODY_READ_TIMEOUT": "60"}
    chunk = f"{MIB:x}\r\n".encode() + b"\x00" * MIB + b"\r\n"
    with running_sidecar(sqlite_database_url, tmp_path, **env) as sidecar, ExitStack() as stack:
        uploads = []
        for _ in range(20):
            sock = stack.enter_context(raw_upload(sidecar, "Transfer-Encoding: chunked\r\n"))
            sock.sendall(chunk)  # 1 MiB, and the body never ends
            uploads.append(sock)
        statuses = [answer_status(sock) for sock in uploads]
        # Those let in stalled and got 408; any refused for the limit on the way got 503.
        assert 408 in statuses and set(statuses) <= {408, 503}, statuses
        assert _rejected(sidecar).get("body_stalled") == statuses.count(408)
        assert _http_statuses(sidecar, 5) == [200] * 5


def test_uploads_that_send_most_of_16_mib_and_stall_refuse_no_other_export(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    # Small exports first: the spans-per-byte estimate learns that bodies like theirs are
    # dense, so 16 MiB would be estimated at tens of thousands of spans. Spans count
    # against the queue only once a body is whole; a stalled one holds its bytes alone.
    env = {"FAULTFINDER_BODY_PROGRESS_TIMEOUT": "60", "FAULTFINDER_BODY_READ_TIMEOUT": "90"}
    with running_sidecar(sqlite_database_url, tmp_path, **env) as sidecar, ExitStack() as stack:
        assert _http_statuses(sidecar, 50) == [200] * 50
        for _ in range(3):
            stalled = stack.enter_context(raw_upload(sidecar, f"Content-Length: {16 * MIB}\r\n"))
            stalled.sendall(b"\x00" * (16 * MIB - 64 * 1024))  # and then nothing
        time.sleep(0.3)
        assert _http_statuses(sidecar, 20) == [200] * 20
        assert _grpc_codes(sidecar, 10) == [grpc.StatusCode.OK] * 10
        assert _rejected(sidecar) == {}
