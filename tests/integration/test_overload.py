"""Overload: offered twice its measured capacity, the sidecar sheds load with 503 +
Retry-After, keeps its memory bounded, keeps answering queries, recovers, and a retrying
exporter loses nothing.

The long version (default queue size) is `faultfinder bench chaos --overload 2`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from faultfinder.benchmarks.chaos import read_stored_state, run_overload
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
            server_pid=sidecar.process.pid,
            database_url=sqlite_database_url,
            factor=2.0,
            duration=8,
            capacity_seconds=4,
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
