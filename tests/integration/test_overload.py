"""Overload: offered twice its measured capacity, the sidecar sheds load with 503 +
Retry-After, keeps its memory bounded, keeps answering queries, recovers, and a retrying
exporter loses nothing.

The long version (default queue size) is `faultfinder bench chaos --overload 2`.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from faultfinder.drills.chaos import (
    ChaosTraffic,
    OverloadDrill,
    read_stored_state,
    run_overload,
)
from faultfinder.drills.chaos.command import parse_pin
from faultfinder.evaluation.sidecar import SidecarProcess
from tests.integration.sidecar import running_sidecar

QUEUE_SPANS = 500
"""A small ingest queue so that a short burst saturates it on any machine."""
PEAK_GROWTH_MB = 200


@pytest.mark.slow
def test_twice_the_capacity_is_shed_with_503_and_nothing_acknowledged_is_lost(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    with running_sidecar(
        sqlite_database_url,
        tmp_path,
        FAULTFINDER_INGEST_QUEUE_SPANS=str(QUEUE_SPANS),
        FAULTFINDER_RETRY_AFTER="1",
        FAULTFINDER_GRPC_ENABLED="false",
    ) as sidecar:
        outcome = run_overload(
            sidecar.url,
            OverloadDrill(factor=2.0, duration=8, capacity_seconds=4),
            server_pid=sidecar.process.pid,
            database_url=sqlite_database_url,
        )
        report = outcome.report
        assert sidecar.process.poll() is None, sidecar.log()[-3000:]  # it did not crash

    # Overload was reached and answered the retryable way, every time with Retry-After.
    assert report.responses.get(503, 0) > 0, report
    assert report.throttled_without_retry_after == 0
    assert set(report.responses) <= {200, 503}, report.responses  # no 5xx crash, no 4xx
    # Queries kept being answered while ingest was saturated.
    assert report.queries >= 5 and report.query_failures == 0, report.errors
    assert report.recovered, report
    # The retrying senders got every span acknowledged, and every acknowledged span is stored.
    assert report.spans_given_up == 0
    assert outcome.offered <= outcome.acknowledged
    stored = asyncio.run(read_stored_state(sqlite_database_url)).spans
    assert outcome.acknowledged <= stored
    assert len(outcome.acknowledged) > 20 * QUEUE_SPANS
    # The SDK's exporter (6 tries per batch) ran alongside; what it was told is stored is.
    assert report.exporter_batches > 0
    # Memory stays bounded by the queue and the open requests, not by what was offered:
    # an unbounded queue would hold the backlog of 2x overload (capacity x duration spans,
    # ≈2.5 kB each on the wire and several times that decoded).
    assert report.peak_rss_mb is not None and report.baseline_rss_mb is not None
    assert report.peak_rss_mb - report.baseline_rss_mb < PEAK_GROWTH_MB, report


def _read_http_response(sock: socket.socket) -> bytes:
    """One HTTP/1.1 response with a Content-Length body, read from a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head


def test_bodies_still_arriving_hold_the_inflight_budget_and_others_are_told_to_retry(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    # A slow sender holds a request body half sent. With an in-flight budget of one such
    # body, other requests are refused at once with 503 + Retry-After instead of being
    # buffered; the refused connection stays usable, and once the slow body is complete
    # both it and a retried request are acknowledged and stored.
    traffic = ChaosTraffic(runs_per_request=1, failed_interval_s=None, realistic=True)
    slow, other = traffic.next_request(), traffic.next_request()
    with running_sidecar(
        sqlite_database_url,
        tmp_path,
        FAULTFINDER_INGEST_INFLIGHT_BYTES=str(len(slow.body)),
        FAULTFINDER_GRPC_ENABLED="false",
    ) as sidecar:
        address = urlsplit(sidecar.url)
        half = len(slow.body) // 2
        with (
            socket.create_connection((address.hostname, address.port), timeout=30) as sock,
            httpx.Client(base_url=sidecar.url, timeout=30) as client,
        ):
            sock.sendall(
                f"POST /v1/traces HTTP/1.1\r\nHost: {address.netloc}\r\n".encode()
                + b"Content-Type: application/x-protobuf\r\n"
                + f"Content-Length: {len(slow.body)}\r\n\r\n".encode()
                + slow.body[:half]
            )
            headers = {"content-type": "application/x-protobuf"}
            deadline = time.monotonic() + 20
            refused = None
            while refused is None and time.monotonic() < deadline:
                # Until the server has started on the slow request, others go through.
                answer = client.post("/v1/traces", content=other.body, headers=headers)
                if answer.status_code == 503:
                    refused = answer
                else:
                    assert answer.status_code == 200, answer.text
                    other = traffic.next_request()
                    time.sleep(0.05)
            assert refused is not None, "no request was refused while a body was arriving"
            assert refused.headers.get("retry-after") == "1"
            assert b"ingest busy" in refused.content
            # The refused body was read and dropped: the client's connection goes on.
            assert client.get("/readyz").status_code == 200

            sock.sendall(slow.body[half:])
            assert _read_http_response(sock).startswith(b"HTTP/1.1 200")
            retried = client.post("/v1/traces", content=other.body, headers=headers)
            assert retried.status_code == 200, retried.text
    stored = asyncio.run(read_stored_state(sqlite_database_url)).spans
    assert set(slow.spans) <= stored
    assert set(other.spans) <= stored


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two cores")
def test_a_pinned_sidecar_and_all_its_threads_run_on_the_given_core_only(tmp_path: Path) -> None:
    # `bench chaos --overload 2 --pin 0:1`: the server on one core, the load on another.
    server_core = min(os.sched_getaffinity(0))
    with SidecarProcess(
        f"sqlite+aiosqlite:///{tmp_path / 'pinned.db'}", tmp_path, cpus={server_core}
    ) as sidecar:
        threads = list(Path(f"/proc/{sidecar.pid}/task").iterdir())
        assert len(threads) > 1  # the SQLite driver's and the exporter's threads too
        for thread in threads:
            assert os.sched_getaffinity(int(thread.name)) == {server_core}
        assert httpx.get(f"{sidecar.url}/readyz").status_code == 200


def test_pin_takes_two_disjoint_core_lists_of_this_machine() -> None:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) > 1:
        assert parse_pin(f"{cores[0]}:{cores[1]}") == ({cores[0]}, {cores[1]})
    for wrong, says in [
        ("0", "SERVER:LOAD"),
        ("0:", "SERVER:LOAD"),
        ("0:0", "share cores [0]"),
        ("0:x", "'x' is not a core number"),
        ("0:4096", "no cores [4096] here"),
    ]:
        with pytest.raises(ValueError, match=re.escape(says)):
            parse_pin(wrong)
