"""The ingest pipeline: a bounded queue of decoded spans and the one writer that stores them.

Receivers (OTLP/HTTP, OTLP/gRPC) only decode and `submit`. The writer coalesces
whatever is waiting into one transaction (group commit) and then releases every
request whose spans it stored, so an acknowledgement means the spans are durable
in the database. When more spans wait than the queue allows, `submit` refuses at
once and the receiver answers 503/UNAVAILABLE with Retry-After (backpressure).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from faultfinder.server.otlp.model import SpanRecord

log = logging.getLogger(__name__)

WriteSpans = Callable[[Sequence[SpanRecord]], Awaitable[int]]


class IngestSaturatedError(Exception):
    """The queue is full: the caller should retry later."""


class IngestUnavailableError(Exception):
    """The spans could not be stored in time (database down or too slow)."""


@dataclass
class _Pending:
    spans: Sequence[SpanRecord]
    done: asyncio.Future[None]


@dataclass
class IngestCounters:
    """Running totals, read by /api/stats/ingest and /metrics."""

    spans_received: int = 0
    spans_stored: int = 0
    spans_rejected: dict[str, int] = field(default_factory=dict)
    """Individually invalid spans dropped from accepted requests, by reason."""
    requests_rejected: dict[str, int] = field(default_factory=dict)
    """Whole requests turned away, by reason (undecodable, too_large, saturated, …)."""
    write_errors: int = 0
    batches_written: int = 0

    def reject_spans(self, reason: str, count: int) -> None:
        self.spans_rejected[reason] = self.spans_rejected.get(reason, 0) + count

    def reject_request(self, reason: str) -> None:
        self.requests_rejected[reason] = self.requests_rejected.get(reason, 0) + 1


class SpanWriter:
    """Bounded queue + single writer task, as an async context manager (a daemon)."""

    def __init__(
        self,
        write: WriteSpans,
        *,
        max_queued_spans: int,
        max_batch_spans: int,
        ack_timeout: float,
        retry_backoff: tuple[float, float] = (0.05, 2.0),
    ) -> None:
        self._write = write
        self._max_queued = max_queued_spans
        self._max_batch = max_batch_spans
        self._ack_timeout = ack_timeout
        self._backoff_min, self._backoff_max = retry_backoff
        self._pending: deque[_Pending] = deque()
        self._queued_spans = 0
        self._wakeup = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self.counters = IngestCounters()

    @property
    def queued_spans(self) -> int:
        return self._queued_spans

    async def __aenter__(self) -> SpanWriter:
        self._task = asyncio.create_task(self._run(), name="faultfinder-span-writer")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # Clean shutdown drains the queue: every acknowledged-to-be span gets written.
        self._stopping = True
        self._wakeup.set()
        if self._task is not None:
            await self._task

    async def submit(self, spans: Sequence[SpanRecord]) -> None:
        """Queue spans and wait until they are stored.

        Raises IngestSaturatedError when the queue is full (nothing was queued) and
        IngestUnavailableError when they were not stored within the ack timeout (they
        stay queued and will still be written).
        """
        self.counters.spans_received += len(spans)
        if not spans:
            return
        if self._stopping:
            raise IngestUnavailableError("the sidecar is shutting down")
        if self._queued_spans + len(spans) > self._max_queued and self._queued_spans > 0:
            self.counters.reject_request("saturated")
            raise IngestSaturatedError(
                f"ingest queue full ({self._queued_spans} spans waiting, limit {self._max_queued})"
            )
        item = _Pending(spans, asyncio.get_running_loop().create_future())
        self._pending.append(item)
        self._queued_spans += len(spans)
        self._wakeup.set()
        try:
            await asyncio.wait_for(asyncio.shield(item.done), self._ack_timeout)
        except TimeoutError:
            raise IngestUnavailableError(
                f"spans not stored within {self._ack_timeout:g}s; they remain queued"
            ) from None

    def _take_batch(self) -> list[_Pending]:
        batch: list[_Pending] = []
        total = 0
        while self._pending and (
            not batch or total + len(self._pending[0].spans) <= self._max_batch
        ):
            item = self._pending.popleft()
            batch.append(item)
            total += len(item.spans)
        return batch

    async def _run(self) -> None:
        backoff = self._backoff_min
        while True:
            if not self._pending:
                if self._stopping:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            batch = self._take_batch()
            spans = [span for item in batch for span in item.spans]
            try:
                await self._write(spans)
            except Exception:
                # Keep the batch at the head of the queue and retry: nothing is dropped.
                self.counters.write_errors += 1
                log.exception("storing %d spans failed; retrying in %.2fs", len(spans), backoff)
                self._pending.extendleft(reversed(batch))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._backoff_max)
                continue
            backoff = self._backoff_min
            self._queued_spans -= len(spans)
            self.counters.spans_stored += len(spans)
            self.counters.batches_written += 1
            for item in batch:
                if not item.done.done():
                    item.done.set_result(None)
