"""The ingest writer: acknowledges only stored spans, pushes back when full, never drops,
and isolates a span the database refuses instead of retrying its batch forever."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, StatementError
from sqlalchemy.ext.asyncio import AsyncEngine

from faultfinder.reading.model import SpanRecord
from faultfinder.server.db.engine import create_engine
from faultfinder.server.db.failures import is_transient
from faultfinder.server.db.migrate import upgrade
from faultfinder.server.ingest import (
    DurationHistogram,
    IngestSaturatedError,
    IngestUnavailableError,
    SpanWriter,
    Stored,
    WriteSpans,
)
from faultfinder.server.store import SpanStore


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


async def test_queue_wait_and_commit_time_are_measured_per_request_and_transaction() -> None:
    store = RecordingStore()
    store.gate.clear()
    async with SpanWriter(
        store.write, max_queued_spans=1000, max_batch_spans=500, ack_timeout=5
    ) as writer:
        first = asyncio.create_task(writer.submit(spans(10, trace=1)))
        await asyncio.sleep(0.01)  # the writer has taken it and waits on the database
        second = asyncio.create_task(writer.submit(spans(10, trace=2)))
        await asyncio.sleep(0.2)
        store.gate.set()
        await asyncio.gather(first, second)
    counters = writer.counters
    # Two transactions; the first was held up 0.2 s by the database.
    assert len(store.transactions) == 2
    assert counters.commit_seconds.count == 2
    assert counters.commit_seconds.total_seconds >= 0.2
    # The first request was taken at once; the second waited behind the blocked write.
    assert counters.queue_seconds.count == 2
    buckets = dict(counters.queue_seconds.cumulative())
    assert buckets["0.1"] == 1
    assert buckets["+Inf"] == 2
    assert counters.queue_seconds.total_seconds >= 0.2


def test_duration_buckets_hold_values_up_to_their_bound() -> None:
    histogram = DurationHistogram(bounds=(0.01, 0.1))
    for seconds in (0.0, 0.01, 0.0100001, 0.1, 7.0):
        histogram.observe(seconds)
    assert histogram.cumulative() == [("0.01", 2), ("0.1", 4), ("+Inf", 5)]
    assert histogram.count == 5
    assert histogram.total_seconds == pytest.approx(7.1200001)


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
    # Only the try that committed is timed.
    assert writer.counters.commit_seconds.count == len(store.transactions) == 1


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


async def test_a_request_queued_as_writes_start_failing_hears_503_without_the_ack_timeout() -> None:
    store = RecordingStore()
    store.failures_left = 10**9  # the database has stopped taking writes
    writer = SpanWriter(
        store.write,
        max_queued_spans=1000,
        max_batch_spans=500,
        ack_timeout=30,
        retry_backoff=(0.01, 0.05),
    )
    async with writer:
        started = asyncio.get_running_loop().time()
        with pytest.raises(IngestUnavailableError, match="not taking writes"):
            await writer.submit(spans(10))
        # Refused once writes had failed for FAIL_FAST_AFTER (2 s), not after 30 s.
        assert asyncio.get_running_loop().time() - started < 2 + 1
        store.failures_left = 0  # writable again: the queued spans are stored
    assert len(store.stored) == 10


# -- a span the database refuses, on a real SQLite store -------------------------------------

BEYOND_INT64 = 2**63
"""A span time SQLite (and PostgreSQL) cannot store in a 64-bit integer column."""
SECRET = "private prompt text"
"""Span content that must never reach the logs."""


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'faultfinder.db'}"
    upgrade(url, show_progress=False)
    return url


@pytest.fixture
async def sqlite_store(sqlite_url: str) -> AsyncIterator[SpanStore]:
    engine = create_engine(sqlite_url)
    try:
        yield SpanStore(engine)
    finally:
        await engine.dispose()


def run_spans(trace: int, n: int = 4, *, name: str = SECRET) -> list[SpanRecord]:
    """A small run: a root and `n - 1` children, realistic enough for the store's run rows."""
    trace_id = f"{trace:032x}"
    return [
        SpanRecord(
            trace_id=trace_id,
            span_id=f"{trace:08x}{i + 1:08x}",
            parent_span_id=None if i == 0 else f"{trace:08x}{1:08x}",
            name=f"{name} {i}",
            start_time_unix_nano=1_700_000_000_000_000_000 + i,
            end_time_unix_nano=1_700_000_000_000_000_000 + 100 + i,
        )
        for i in range(n)
    ]


def beyond_int64(span: SpanRecord) -> SpanRecord:
    return dataclasses.replace(span, end_time_unix_nano=BEYOND_INT64)


def lone_surrogate(span: SpanRecord) -> SpanRecord:
    # Not encodable as UTF-8: the driver refuses the statement.
    return dataclasses.replace(span, name=f"{SECRET} \ud800")


class Gate:
    """Holds the first write until released, so that concurrent submissions share one
    batch (the poisoned span's batch then holds other requests' spans too)."""

    def __init__(self, write: WriteSpans) -> None:
        self._write = write
        self.open = asyncio.Event()

    async def write(self, batch: Sequence[SpanRecord]) -> int:
        await self.open.wait()
        return await self._write(batch)


async def stored_ids(store: SpanStore, requests: list[list[SpanRecord]]) -> set[str]:
    found: set[str] = set()
    for spans_of_run in requests:
        found |= {span.span_id for span in await store.run_spans(spans_of_run[0].trace_id)}
    return found


async def submit_as_one_batch(
    writer: SpanWriter, gate: Gate, requests: Sequence[Sequence[SpanRecord]]
) -> list[Any]:
    """Queue every request while the gate is shut, so the writer takes them as one batch."""
    pending = [asyncio.create_task(writer.submit(r)) for r in requests]
    await asyncio.sleep(0.05)
    gate.open.set()
    return list(await asyncio.gather(*pending))


@pytest.mark.parametrize("poison", [beyond_int64, lone_surrogate])
async def test_an_unstorable_span_is_rejected_alone_and_later_batches_flow(
    sqlite_store: SpanStore, poison: Callable[[SpanRecord], SpanRecord], caplog: Any
) -> None:
    requests = [run_spans(trace) for trace in range(1, 7)]
    bad = poison(requests[3][2])
    requests[3][2] = bad
    gate = Gate(sqlite_store.write_spans)
    with caplog.at_level(logging.DEBUG, logger="faultfinder.server.ingest"):
        async with SpanWriter(
            gate.write, max_queued_spans=1000, max_batch_spans=1000, ack_timeout=10
        ) as writer:
            outcomes = await submit_as_one_batch(writer, gate, requests)
            # The queue keeps flowing: the next request is stored and acknowledged at once.
            later = run_spans(99)
            assert await asyncio.wait_for(writer.submit(later), 5) == Stored()

    # Every other span, of the same request and of the requests batched with it, is stored.
    good = {s.span_id for r in requests for s in r} - {bad.span_id}
    assert await stored_ids(sqlite_store, requests) == good
    assert {s.span_id for s in await sqlite_store.run_spans(later[0].trace_id)} == {
        s.span_id for s in later
    }
    # Only the submitter of the bad span hears about it, as a partial success naming it.
    assert [o.rejected for o in outcomes] == [0, 0, 0, 1, 0, 0]
    message = outcomes[3].error_message
    assert bad.span_id in message and bad.trace_id in message and "could not be stored" in message
    assert writer.counters.spans_rejected == {"unstorable": 1}
    assert writer.counters.spans_stored == len(good) + len(later)
    # The run of the bad span still has its other spans counted.
    run = await sqlite_store.get_run(bad.trace_id)
    assert run is not None and run.n_spans == 3
    # Logged once, by id and error class, never with the span's content.
    rejections = [r for r in caplog.records if "rejected span" in r.getMessage()]
    assert len(rejections) == 1 and bad.span_id in rejections[0].getMessage()
    assert SECRET not in caplog.text


async def test_a_constraint_violation_for_one_span_id_rejects_only_that_span(
    sqlite_store: SpanStore,
) -> None:
    """Fault injection around the real store: the database refuses one span id with an
    IntegrityError (as a CHECK or trigger would), every time it is in a write."""
    requests = [run_spans(trace, n=20) for trace in range(1, 4)]
    refused = requests[1][13].span_id

    async def refusing_write(batch: Sequence[SpanRecord]) -> int:
        if any(span.span_id == refused for span in batch):
            raise IntegrityError("INSERT INTO spans …", {}, sqlite3.IntegrityError("CHECK failed"))
        return await sqlite_store.write_spans(batch)

    gate = Gate(refusing_write)
    async with SpanWriter(
        gate.write, max_queued_spans=1000, max_batch_spans=1000, ack_timeout=10
    ) as writer:
        outcomes = await submit_as_one_batch(writer, gate, requests)
    assert [o.rejected for o in outcomes] == [0, 1, 0]
    assert "IntegrityError" in outcomes[1].error_message
    assert await stored_ids(sqlite_store, requests) == {s.span_id for r in requests for s in r} - {
        refused
    }
    # Bisection, not one write per span: 60 spans took far fewer than 60 attempts.
    assert writer.counters.write_errors < 20


def no_busy_wait(engine: AsyncEngine) -> None:
    # Fail at once on a locked database (the default waits 10 s) to see the retry path.
    def connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA busy_timeout=0")
        cursor.close()

    event.listen(engine.sync_engine, "connect", connect)


@pytest.mark.parametrize("transient_attempts", [8, 2])
async def test_a_locked_database_is_retried_and_no_span_is_rejected(
    sqlite_url: str, transient_attempts: int
) -> None:
    """Another process holds SQLite's write lock: real "database is locked" errors.

    With few transient attempts the batch is split down to single spans while the lock
    is held, and those are retried, not rejected: an outage only delays ingest.
    """
    engine = create_engine(sqlite_url)
    no_busy_wait(engine)
    store = SpanStore(engine)
    locker = sqlite3.connect(sqlite_url.removeprefix("sqlite+aiosqlite:///"))
    try:
        locker.execute("BEGIN EXCLUSIVE")
        requests = [run_spans(trace, n=6) for trace in range(1, 5)]
        async with SpanWriter(
            store.write_spans,
            max_queued_spans=1000,
            max_batch_spans=1000,
            ack_timeout=20,
            retry_backoff=(0.01, 0.05),
            transient_attempts=transient_attempts,
        ) as writer:
            pending = [asyncio.create_task(writer.submit(r)) for r in requests]
            await asyncio.sleep(0.6)
            assert not any(task.done() for task in pending)  # not stored: not acknowledged
            assert writer.counters.write_errors >= 2
            locker.rollback()
            outcomes = await asyncio.gather(*pending)
        assert outcomes == [Stored()] * len(requests)
        assert writer.counters.spans_rejected == {}
        assert await stored_ids(store, requests) == {s.span_id for r in requests for s in r}
    finally:
        locker.close()
        await engine.dispose()


def test_transient_errors_are_told_apart_from_refused_data() -> None:
    locked = sqlite3.OperationalError("database is locked")
    too_many = sqlite3.OperationalError("too many SQL variables")
    # Python sets these on errors raised by SQLite itself.
    locked.sqlite_errorcode, locked.sqlite_errorname = 5, "SQLITE_BUSY"  # type: ignore[attr-defined]
    too_many.sqlite_errorcode, too_many.sqlite_errorname = 1, "SQLITE_ERROR"  # type: ignore[attr-defined]
    assert is_transient(OperationalError("INSERT", {}, locked))
    assert not is_transient(OperationalError("INSERT", {}, too_many))
    assert not is_transient(IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE")))
    assert is_transient(ConnectionResetError("reset by peer"))
    assert not is_transient(OverflowError("int too large"))
    invalidated = DBAPIError("INSERT", {}, Exception("gone"), connection_invalidated=True)
    assert is_transient(invalidated)
    # SQLAlchemy wraps errors raised outside the driver; the cause decides.
    assert is_transient(StatementError("reset", "INSERT", {}, ConnectionResetError()))
    encode = UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
    assert not is_transient(StatementError("encode", "INSERT", {}, encode))


async def test_a_small_request_is_stored_between_the_parts_of_a_large_one() -> None:
    store = RecordingStore()
    store.gate.clear()
    async with SpanWriter(
        store.write, max_queued_spans=10_000, max_batch_spans=100, ack_timeout=5
    ) as writer:
        large = asyncio.create_task(writer.submit(spans(350, trace=1)))
        await asyncio.sleep(0.01)  # its first part is being written
        small = asyncio.create_task(writer.submit(spans(5, trace=2)))
        await asyncio.sleep(0.01)
        store.gate.set()
        await small
        assert not large.done()  # the small one did not wait for all of the large one
        assert await large == Stored()
    # Transactions of one part each, the small request right after the first part.
    assert store.transactions == [100, 5, 100, 100, 50]
    assert len(store.stored) == 355
    assert writer.queued_spans == 0
