"""The ingest pipeline: a bounded queue of decoded spans and the one writer that stores them.

Receivers (OTLP/HTTP, OTLP/gRPC) only decode and `submit`. The writer coalesces
whatever is waiting into one transaction (group commit) and then releases every
request whose spans it stored, so an acknowledgement means the spans are durable
in the database. When more spans wait than the queue allows, `submit` refuses at
once and the receiver answers 503/UNAVAILABLE with Retry-After (backpressure).

A failed write is never dropped and never blocks the queue for good. A transient
error (database locked or busy, connection lost, serialization failure, deadlock) is
retried with backoff. Any other error — or a transient-looking one that keeps coming
back — splits the batch in halves that are stored separately, down to one submission
and then one span, so every storable span is stored and only a span the database
refuses is rejected (a submission whose spans fail more than `SPLIT_BUDGET`
transactions has the ones still failing rejected together, in bounded time): counted,
logged by id (never by content) and reported to its submitter as a partial success.
A single span is never rejected for a transient error; a database outage only ever
delays ingest. A database that refuses every write
(read-only after a failover, full, without privileges) is such an outage: requests get
503 with Retry-After (at once once writes have failed for `FAIL_FAST_AFTER` seconds) and
`/readyz` reports it, never a 200 partial success that exporters would not retry.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from faultfinder.reading.model import SpanRecord
from faultfinder.server.daemon import Daemon
from faultfinder.server.db.failures import error_class, is_transient, retry_reason
from faultfinder.server.errors import IngestSaturatedError as IngestSaturatedError
from faultfinder.server.errors import IngestUnavailableError as IngestUnavailableError
from faultfinder.server.errors import InternalSignal
from faultfinder.server.run_budget import RUN_TOO_LARGE, Admitted, RunSpanBudget

log = logging.getLogger(__name__)

WriteSpans = Callable[[Sequence[SpanRecord]], Awaitable[int]]


FAIL_FAST_AFTER = 2.0
"""Seconds writes must have been failing before new submissions are refused at once
(shorter trouble, a lock held for a moment, only delays them)."""


_FAILING_CHECK_INTERVAL = 0.25
"""Seconds between a waiting request's looks at whether writes have been failing."""


STOP_GRACE = 10.0
"""Seconds a stopping writer keeps retrying writes the database refuses before it gives
up on the spans still queued (never acknowledged: their requests got 503)."""


class _GaveUp(InternalSignal):
    """The writer is stopping and the database still refuses writes."""


SPLIT_BUDGET = 32
"""Refused transactions of one submission's spans before the spans of it that still fail
are rejected together rather than split further: enough to isolate one bad span in a
20,000-span request (15 halvings), bounded when every span is bad (a few dozen
transactions, not one per span)."""


UNSTORABLE = "unstorable"
"""`IngestCounters.spans_rejected` reason of spans the database refused to store."""


@dataclass(frozen=True, slots=True)
class Stored:
    """What became of one submission: spans the database refused, and why (ids only)."""

    rejected: int = 0
    error_message: str = ""


@dataclass
class _Pending:
    spans: Sequence[SpanRecord]
    done: asyncio.Future[Stored]
    queued_at: float = field(default_factory=time.perf_counter)
    rejected: list[str] = field(default_factory=list)
    """One line per span the database refused."""
    failed_writes: int = 0
    """Transactions of this submission's spans alone that the database refused."""

    def outcome(self) -> Stored:
        if not self.rejected:
            return Stored()
        shown = self.rejected[:3]
        more = len(self.rejected) - len(shown)
        message = "; ".join(shown) + (f"; and {more} more" if more else "")
        return Stored(len(self.rejected), message)


@dataclass(frozen=True, slots=True)
class _Part:
    """Some spans of one submission: the unit a failing batch is split into."""

    item: _Pending
    spans: Sequence[SpanRecord]


def _split(group: list[_Part]) -> tuple[list[_Part], list[_Part]] | None:
    """Two halves of `group`, by submission while it holds several, then by span; None
    for a single span."""
    if len(group) > 1:
        middle = len(group) // 2
        return group[:middle], group[middle:]
    part = group[0]
    if len(part.spans) <= 1:
        return None
    middle = len(part.spans) // 2
    return [_Part(part.item, part.spans[:middle])], [_Part(part.item, part.spans[middle:])]


SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds of the ingest duration histograms, in seconds."""


@dataclass
class DurationHistogram:
    """Counts of durations per bucket (`counts[i]`: at most `bounds[i]` seconds and more
    than the bound before; the last count is above every bound) and their sum."""

    bounds: tuple[float, ...] = SECONDS_BUCKETS
    counts: list[int] = field(default_factory=list)
    total_seconds: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.total_seconds += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """(`le`, observations at most that many seconds), ending with `+Inf`."""
        running = 0
        out: list[tuple[str, int]] = []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return out


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
    values_truncated: int = 0
    """Attribute values cut to the size cap or replaced for nesting too deeply at decode."""
    decode_seconds: DurationHistogram = field(default_factory=DurationHistogram)
    """Per request: decompressing and decoding its body (the receivers observe it)."""
    queue_seconds: DurationHistogram = field(default_factory=DurationHistogram)
    """Per submission: from entering the queue until the writer takes it."""
    commit_seconds: DurationHistogram = field(default_factory=DurationHistogram)
    """Per committed transaction: the write that stored it (failed tries not included)."""

    def reject_spans(self, reason: str, count: int) -> None:
        self.spans_rejected[reason] = self.spans_rejected.get(reason, 0) + count

    def reject_request(self, reason: str) -> None:
        self.requests_rejected[reason] = self.requests_rejected.get(reason, 0) + 1


class SpanWriter(Daemon):
    """Bounded queue + single writer task, as an async context manager (a daemon).

    Stopping drains the queue: every span already queued is written before it ends."""

    name = "faultfinder-span-writer"
    drain_on_stop = True

    def __init__(
        self,
        write: WriteSpans,
        *,
        max_queued_spans: int,
        max_batch_spans: int,
        ack_timeout: float,
        retry_backoff: tuple[float, float] = (0.05, 2.0),
        transient_attempts: int = 8,
        budget: RunSpanBudget | None = None,
    ) -> None:
        """`transient_attempts`: tries of one batch that keeps failing with transient
        errors before it is split (with the default backoff, about 7 s). `budget` keeps
        each run within its most spans (the rest of a full run's spans are refused)."""
        super().__init__()
        self._budget = budget
        self._write = write
        self._max_queued = max_queued_spans
        self._max_batch = max_batch_spans
        self._ack_timeout = ack_timeout
        self._backoff_min, self._backoff_max = retry_backoff
        self._transient_attempts = max(1, transient_attempts)
        self._pending: deque[_Pending] = deque()
        self._queued_spans = 0
        self._wakeup = asyncio.Event()
        self.counters = IngestCounters()
        self._failing: tuple[float, str] | None = None
        self._stop_requested_at: float | None = None

    @property
    def failing(self) -> str | None:
        """Why writes have been failing since the last stored batch (a transient database
        error, e.g. a read-only or full database), or None while they succeed. Readiness
        reports it: ingest is answering 503, not storing."""
        if self._failing is None:
            return None
        since, reason = self._failing
        return f"writes failing for {time.monotonic() - since:.0f} s: {reason}"

    @property
    def queued_spans(self) -> int:
        return self._queued_spans

    def stop_requested(self) -> None:
        self._stop_requested_at = time.monotonic()
        self._wakeup.set()

    async def submit(self, spans: Sequence[SpanRecord]) -> Stored:
        """Queue spans and wait until they are stored.

        Returns which spans the database refused (usually none): the receiver reports
        them as a partial success; every other span is durable.
        Raises IngestSaturatedError when the queue is full (nothing was queued) and
        IngestUnavailableError when they were not stored within the ack timeout (what was
        queued stays queued and will still be written; a retry stores the rest, and spans
        already stored are not stored twice).
        """
        self.counters.spans_received += len(spans)
        if not spans:
            return Stored()
        if self.stopping:
            raise IngestUnavailableError("the sidecar is shutting down")
        if self._failing is not None and time.monotonic() - self._failing[0] >= FAIL_FAST_AFTER:
            # Queueing more behind a batch the database keeps refusing would only make the
            # caller wait out the ack timeout: it hears 503 now and retries later.
            self.counters.reject_request("database_unavailable")
            raise IngestUnavailableError(f"the database is not taking writes ({self.failing})")
        if self._queued_spans + len(spans) > self._max_queued and self._queued_spans > 0:
            self.counters.reject_request("saturated")
            raise IngestSaturatedError(
                f"ingest queue full ({self._queued_spans} spans waiting, limit {self._max_queued})"
            )
        full = Admitted(spans) if self._budget is None else self._budget.admit(spans)
        if full.refused:
            self.counters.reject_spans(RUN_TOO_LARGE, full.refused)
        spans = full.spans
        if not spans:
            return Stored(full.refused, "; ".join(full.messages))
        deadline = time.monotonic() + self._ack_timeout
        rejected, messages = full.refused, list(full.messages)
        # A request larger than one transaction is queued a transaction's worth at a time:
        # what other clients sent meanwhile is stored between its parts, so a small export
        # never waits behind a 20,000-span one. Acknowledged once every part is stored;
        # the queue counts all of its spans from the start (the writer uncounts each part
        # as it stores it).
        self._queued_spans += len(spans)
        unqueued = len(spans)
        try:
            for start in range(0, len(spans), self._max_batch):
                if start and self.stopping:
                    raise IngestUnavailableError("the sidecar is shutting down")
                part = spans[start : start + self._max_batch]
                item = _Pending(part, asyncio.get_running_loop().create_future())
                self._pending.append(item)
                unqueued -= len(part)
                self._wakeup.set()
                stored = await self._acknowledgement(item, deadline)
                rejected += stored.rejected
                if stored.error_message:
                    messages.append(stored.error_message)
        finally:
            self._queued_spans -= unqueued  # parts never queued (a timeout, a stop)
        return Stored(rejected, "; ".join(messages))

    async def _acknowledgement(self, item: _Pending, deadline: float) -> Stored:
        """Wait until `item` is stored. IngestUnavailableError after the ack timeout, or
        once writes have been failing for `FAIL_FAST_AFTER` seconds: a request queued just
        before the database stopped taking writes (read-only, full) hears 503 then, like
        the requests after it, not after the whole ack timeout. Its spans stay queued
        either way and are stored once the database takes writes again."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise IngestUnavailableError(
                    f"spans not stored within {self._ack_timeout:g}s; they remain queued"
                )
            try:
                return await asyncio.wait_for(
                    asyncio.shield(item.done), min(left, _FAILING_CHECK_INTERVAL)
                )
            except TimeoutError:
                failing = self._failing
                if failing is not None and time.monotonic() - failing[0] >= FAIL_FAST_AFTER:
                    raise IngestUnavailableError(
                        f"the database is not taking writes ({self.failing}); "
                        "the spans remain queued"
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

    async def run(self) -> None:
        while True:
            if not self._pending:
                if self.stopping:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            batch = self._take_batch()
            taken = time.perf_counter()
            for item in batch:
                self.counters.queue_seconds.observe(taken - item.queued_at)
            try:
                await self._store([_Part(item, item.spans) for item in batch])
            except _GaveUp:
                self._give_up([*batch, *self._pending])
                return
            self._queued_spans -= sum(len(item.spans) for item in batch)
            for item in batch:
                if not item.done.done():
                    item.done.set_result(item.outcome())

    def _give_up(self, items: list[_Pending]) -> None:
        spans = sum(len(item.spans) for item in items)
        log.error(
            "stopping with %d spans unstored: the database refused writes for %g s (%s); "
            "none of them was acknowledged",
            spans,
            STOP_GRACE,
            self.failing,
        )
        self._pending.clear()
        self._queued_spans = 0
        for item in items:
            if not item.done.done():
                item.done.set_exception(
                    IngestUnavailableError("the sidecar stopped before these spans were stored")
                )
                item.done.exception()  # retrieved: a caller that timed out never awaits it

    async def _store(self, parts: list[_Part]) -> None:
        """Store every span of `parts` that the database accepts; reject the others."""
        waiting = [parts]
        while waiting:
            group = waiting.pop()
            error = await self._attempt(group)
            if error is None:
                continue
            halves = _split(group)
            if len(group) == 1:
                group[0].item.failed_writes += 1
            if halves is None:
                self._reject(group[0], error)
            elif len(group) == 1 and group[0].item.failed_writes > SPLIT_BUDGET:
                # A submission full of spans the database refuses (every run id too long
                # for its index, say) would take a transaction per span to isolate while
                # every other export waits: past its budget, what still fails is refused
                # whole.
                self._reject_all(group[0], error)
            else:
                # The first half first: "latest value wins" run facts keep arrival order.
                waiting.extend(reversed(halves))

    async def _attempt(self, group: list[_Part]) -> BaseException | None:
        """Write `group` in one transaction, retrying transient errors; returns the error
        that makes splitting it worthwhile, or None once it is stored.

        A single span is retried for as long as the error is transient: only the data,
        never an unavailable database, gets a span rejected.
        """
        spans = [span for part in group for span in part.spans]
        backoff = self._backoff_min
        attempts = 0
        while True:
            started = time.perf_counter()
            try:
                await self._write(spans)
            except Exception as error:
                self.counters.write_errors += 1
                attempts += 1
                transient = is_transient(error)
                if not transient or (attempts >= self._transient_attempts and len(spans) > 1):
                    log.debug(
                        "storing %d spans failed (%s); splitting", len(spans), error_class(error)
                    )
                    return error
                reason = retry_reason(error)
                if self._failing is None:
                    self._failing = (time.monotonic(), reason)
                stop = self._stop_requested_at
                if stop is not None and time.monotonic() - stop >= STOP_GRACE:
                    raise _GaveUp from error
                log.warning(
                    "storing %d spans failed (%s); retrying in %.2fs", len(spans), reason, backoff
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._backoff_max)
                continue
            self._failing = None
            self.counters.commit_seconds.observe(time.perf_counter() - started)
            self.counters.spans_stored += len(spans)
            self.counters.batches_written += 1
            return None

    def _reject_all(self, part: _Part, error: BaseException) -> None:
        log.error(
            "rejected %d spans of one request: the database refused them (%s), and its "
            "spans had failed %d transactions",
            len(part.spans),
            error_class(error),
            part.item.failed_writes,
        )
        for span in part.spans:
            self._reject(_Part(part.item, (span,)), error, logged=False)

    def _reject(self, part: _Part, error: BaseException, *, logged: bool = True) -> None:
        span = part.spans[0]
        reason = error_class(error)
        if logged:
            log.error(
                "rejected span %s of trace %s: the database refused it (%s)",
                span.span_id,
                span.trace_id,
                reason,
            )
        self.counters.reject_spans(UNSTORABLE, 1)
        part.item.rejected.append(
            f"span {span.span_id} of trace {span.trace_id} could not be stored ({reason})"
        )
