"""Slow and unfinished uploads on a real sidecar: they hold neither memory nor ingest.

A sender that declares a large body and trickles it, or streams a chunked body without
ever ending it, is what a broken exporter or an attacker does. Bytes count against the
in-flight limit as they arrive, never by what a request declares; a body slower than
`FAULTFINDER_BODY_READ_TIMEOUT` gets 408; an unfinished body refused for the limit gets
its 503 and its connection closed.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from faultfinder.attributors.model import Step, StepKind, Trajectory
from tests.integration.raw_http import answer_status, raw_upload
from tests.integration.sidecar import Sidecar, running_sidecar
from tests.otlp_helpers import protobuf_body, trajectory_spans

MIB = 1024 * 1024
TIMEOUT_S = 3


def _normal_request(sidecar: Sidecar) -> httpx.Response:
    steps = (Step(index=0, agent="writer", kind=StepKind.MESSAGE, content="4"),)
    body = protobuf_body(trajectory_spans(Trajectory(run_id="r", task="t", steps=steps)))
    return httpx.post(
        f"{sidecar.url}/v1/traces",
        content=body,
        headers={"content-type": "application/x-protobuf"},
        timeout=30,
    )


def test_slow_senders_declaring_large_bodies_do_not_block_ingest(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    env = {
        "FAULTFINDER_INGEST_INFLIGHT_BYTES": str(MIB),
        "FAULTFINDER_BODY_READ_TIMEOUT": str(TIMEOUT_S),
    }
    with running_sidecar(sqlite_database_url, tmp_path, **env) as sidecar, ExitStack() as stack:
        slow = [
            stack.enter_context(raw_upload(sidecar, f"Content-Length: {16 * MIB}\r\n"))
            for _ in range(4)
        ]
        for sock in slow:
            sock.sendall(b"\x0a")  # one byte of 16 MiB, and then nothing
        time.sleep(0.5)
        # Four declared 16 MiB bodies reserve nothing: a normal export goes through.
        assert _normal_request(sidecar).status_code == 200
        # Each is answered: 408 once its body is late, or 503 where its declared length
        # would pass the limit next to what the first one sent (then the connection closes).
        statuses = [answer_status(sock) for sock in slow]
        assert 408 in statuses and set(statuses) <= {408, 503}, statuses
        rejected = httpx.get(f"{sidecar.url}/api/stats/ingest", timeout=10).json()[
            "requests_rejected"
        ]
        assert rejected.get("body_timeout", 0) == statuses.count(408)
        assert rejected.get("inflight", 0) == statuses.count(503)


def test_unfinished_chunked_uploads_are_refused_past_the_inflight_limit(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    env = {
        "FAULTFINDER_INGEST_INFLIGHT_BYTES": str(5 * MIB // 2),
        "FAULTFINDER_BODY_READ_TIMEOUT": str(TIMEOUT_S),
    }
    chunk = f"{MIB:x}\r\n".encode() + b"\x00" * MIB + b"\r\n"
    with running_sidecar(sqlite_database_url, tmp_path, **env) as sidecar, ExitStack() as stack:
        uploads = []
        for _ in range(6):
            sock = stack.enter_context(raw_upload(sidecar, "Transfer-Encoding: chunked\r\n"))
            sock.sendall(chunk)  # 1 MiB, and the body never ends
            uploads.append(sock)
            time.sleep(0.3)
        # What the unfinished uploads hold stays under the limit: a small export fits.
        assert _normal_request(sidecar).status_code == 200
        statuses = sorted(answer_status(sock) for sock in uploads)
        # Two fit under 2.5 MiB and time out; the others were refused part-way.
        assert statuses == [408, 408, 503, 503, 503, 503], statuses
        stats = httpx.get(f"{sidecar.url}/api/stats/ingest", timeout=10).json()
        assert stats["requests_rejected"].get("inflight") == 4
