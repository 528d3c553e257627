"""The ingest writer: acknowledges only stored spans, pushes back when full, never drops."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from faultfinder.server.ingest import IngestSaturatedError, IngestUnavailableError, SpanWriter
from faultfinder.server.otlp.model import SpanRecord


def spans(n: int, trace: int = 1) -> list[SpanRecord]:
    return [
        SpanRecord(
            trace_id=f"{trace:032x}",
            span_id=f"{i + 1:016x}",
            parent_span_id=None,
            name=f"span {i}",
            start_time_unix_nano=i,
            end_time_unix_nano=i + 1,
        )
        for i in range(n)
    ]


class RecordingStore:
    """Stores spans in a list; can be told to fail or to block."""

    def __init__(self) -> None:
        self.stored: list[SpanRecord] = []
        self.transactions: list[int] = []
        self.failures_left = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def write(self, batch: Sequence[SpanRecord]) -> int:
        await self.gate.wait()
        if self.failures_left:
            self.failures_left -= 1
            raise ConnectionError("database is down")
        self.stored.extend(batch)
        self.transactions.append(len(batch))
        return len(batch)


async def test_acknowledgement_comes_after_the_spans_are_stored() -> None:
    store = RecordingStore()
    async with SpanWriter(
        store.write, max_queued_spans=1000, max_batch_spans=500, ack_timeout=5
    ) as writer:
        await writer.submit(spans(10))
        assert len(store.stored) == 10
        assert writer.counters.spans_stored == 10


async def test_concurrent_requests_share_transactions() -> None:
    store = RecordingStore()
    store.gate.clear()
    async with SpanWriter(
        store.write, max_queued_spans=10_000, max_batch_spans=5_000, ack_timeout=5
    ) as writer:
        requests = [asyncio.create_task(writer.submit(spans(100, trace=t))) for t in range(20)]
        await asyncio.sleep(0.05)
        store.gate.set()
        await asyncio.gather(*requests)
    assert len(store.stored) == 2000
    # 20 requests waiting together are written in far fewer than 20 transactions.
    assert len(store.transactions) < 20


async def test_a_full_queue_refuses_at_once_and_keeps_what_it_holds() -> None:
    store = RecordingStore()
    store.gate.clear()
    async with SpanWriter(
        store.write, max_queued_spans=250, max_batch_spans=100, ack_timeout=5
    ) as writer:
        first = asyncio.create_task(writer.submit(spans(200, trace=1)))
        await asyncio.sleep(0.01)
        with pytest.raises(IngestSaturatedError, match="queue full"):
            await writer.submit(spans(100, trace=2))
        assert writer.counters.requests_rejected == {"saturated": 1}
        store.gate.set()
        await first
    assert len(store.stored) == 200


async def test_store_failures_are_retried_without_losing_spans() -> None:
    store = RecordingStore()
    store.failures_left = 3
    async with SpanWriter(
        store.write,
        max_queued_spans=1000,
        max_batch_spans=500,
        ack_timeout=5,
        retry_backoff=(0.001, 0.01),
    ) as writer:
        await writer.submit(spans(50))
    assert len(store.stored) == 50
    assert writer.counters.write_errors == 3


async def test_slow_store_times_out_the_request_but_still_writes_on_shutdown() -> None:
    store = RecordingStore()
    store.gate.clear()
    writer = SpanWriter(store.write, max_queued_spans=1000, max_batch_spans=500, ack_timeout=0.05)
    async with writer:
        with pytest.raises(IngestUnavailableError, match="remain queued"):
            await writer.submit(spans(30))
        store.gate.set()
    # Clean shutdown drained the queue: the timed-out spans were stored anyway.
    assert len(store.stored) == 30
