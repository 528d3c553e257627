"""Who the OTLP/HTTP receiver lets in under load, and how long it tells the others to wait.

Refusing a request is not free: its body must still be read (closing the connection
unread could reset it before the sender reads the 503), and under a real overload that
reading, repeated for every sender each time it comes back, can take the core the writer
needs. So the receiver refuses before reading whenever the request would be refused later
anyway, counting the requests already let in and not yet queued, and it spreads the
refused senders' returns over the time ingest needs to take them.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import AsyncIterable, Callable

import anyio

from faultfinder.server.errors import BodyStalled, InflightFull, Refused
from faultfinder.server.ingest import (
    IngestSaturatedError,
    IngestUnavailableError,
    SpanWriter,
    Stored,
)
from faultfinder.server.otlp.decode import DecodedBatch

__all__ = [
    "ArrivingBody",
    "InflightBytes",
    "IngestAdmission",
    "Refused",
    "RetryAdvice",
    "SpansPerByte",
]

_MAX_REMEMBERED = 1_000_000
"""Refusals remembered at most (a float each), however many senders wait."""


class InflightBytes:
    """Request bytes ingest holds at once (received and not yet decoded), with a limit.

    One request is always admitted when nothing is held, so a body up to
    `max_request_bytes` gets through even when it exceeds the limit on its own.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def would_pass(self, size: int) -> bool:
        """Whether `size` more bytes would pass the limit (never with nothing held)."""
        return bool(self.held) and self.held + size > self.limit

    def try_acquire(self, size: int) -> bool:
        if self.would_pass(size):
            return False
        self.held += size
        return True

    def release(self, size: int) -> None:
        self.held -= size


class SpansPerByte:
    """How many spans a request body carries per byte, learned from the bodies decoded so
    far (a moving average), to estimate a request's spans from its Content-Length before
    reading it."""

    def __init__(self, *, initial: float = 1 / 2500, weight: float = 0.05) -> None:
        self.value = initial
        self._weight = weight

    def observe(self, body_bytes: int, spans: int) -> None:
        if body_bytes > 0:
            self.value += self._weight * (spans / body_bytes - self.value)

    def estimate(self, body_bytes: int) -> int:
        return max(1, math.ceil(body_bytes * self.value))


class RetryAdvice:
    """The Retry-After to give a refused sender: the time ingest needs to take the senders
    already told to wait, so that refused senders come back one after another at about the
    rate ingest takes requests, instead of all at once.

    Each refusal is remembered until the time it advised has passed: that many senders
    are waiting. Ingest's rate is the most requests it acknowledged in one second over
    the last `memory` seconds (at least one a second): while senders are away, or the
    store stalls for a while, the rate of acknowledgements falls, and judging by it
    would send them away for longer still.
    A fixed advice instead brings every waiting sender back each time, to be refused
    again; under twice the capacity that re-refusing (each refusal reads its body) took
    most of the core and the writer fell behind. Between `minimum` and `maximum` seconds.
    """

    def __init__(
        self,
        minimum: int,
        maximum: int,
        *,
        memory: int = 300,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.minimum = minimum
        self.maximum = max(minimum, maximum)
        self._clock = clock
        self._returns: list[float] = []
        """When the senders refused so far are due back (a heap)."""
        self._memory = memory
        self._taken: deque[list[int]] = deque()
        """[second, requests acknowledged in it], oldest first, the last `memory` seconds."""

    def _waiting(self, now: float) -> int:
        returns = self._returns
        while returns and returns[0] <= now:
            heapq.heappop(returns)
        return len(returns)

    def _forget(self, second: int) -> None:
        while self._taken and self._taken[0][0] <= second - self._memory:
            self._taken.popleft()

    def _rate(self, now: float) -> int:
        self._forget(int(now))
        return max((count for _, count in self._taken), default=1)

    def current(self) -> int:
        """The advice a refusal would get now (nothing recorded)."""
        now = self._clock()
        waiting = self._waiting(now)
        return min(self.maximum, max(self.minimum, math.ceil((waiting + 1) / self._rate(now))))

    def refused(self) -> int:
        """Seconds to advise a sender refused now; it counts as waiting until then."""
        seconds = self.current()
        if len(self._returns) < _MAX_REMEMBERED:
            heapq.heappush(self._returns, self._clock() + seconds)
        return seconds

    def taken(self) -> None:
        """A request was acknowledged."""
        second = int(self._clock())
        if self._taken and self._taken[-1][0] == second:
            self._taken[-1][1] += 1
        else:
            self._forget(second)
            self._taken.append([second, 1])


class IngestAdmission:
    """What both OTLP receivers need to decide whether to take a request: the bytes being
    received, the spans of requests let in and not yet queued, and the wait to advise
    those they refuse; and the one way both hand a decoded request to the writer."""

    def __init__(self, inflight_bytes: int, retry_after: int, retry_after_max: int) -> None:
        self.bytes = InflightBytes(inflight_bytes)
        self.spans_per_byte = SpansPerByte()
        self.advice = RetryAdvice(retry_after, retry_after_max)
        self.coming_spans = 0
        """Estimated spans of the requests read whole and being decoded (and of gRPC
        messages, which arrive whole)."""

    def queue_refusal(self, queued: int, expected: int, limit: int) -> str:
        """Why a request of about `expected` spans must be refused before it is read or
        decoded, or "" to take it: the spans `queued` for the writer and those of the
        requests read whole and still being decoded leave no room for it under
        `limit`. Each of those would otherwise be decoded only to find the queue full."""
        waiting = queued + self.coming_spans
        if waiting and waiting + expected > limit:
            return (
                f"ingest queue full ({queued} spans waiting, about "
                f"{self.coming_spans} more being decoded, limit {limit})"
            )
        return ""

    async def store(
        self, writer: SpanWriter, batch: DecodedBatch, *, unavailable_wait: int
    ) -> Stored:
        """Queue a decoded request's spans and wait until they are stored: what the
        database and the decoder rejected of them, and why. `Refused` when the queue is
        full (the advised wait) or the database or a shutdown stops it
        (`unavailable_wait`, the configured one: not the load)."""
        if batch.rejected:
            writer.counters.reject_spans("invalid_span", batch.rejected)
        writer.counters.values_truncated += batch.truncated_values
        try:
            stored = await writer.submit(batch.spans)
        except IngestSaturatedError as exc:
            raise Refused(str(exc), self.advice.refused()) from exc
        except IngestUnavailableError as exc:
            raise Refused(str(exc), unavailable_wait) from exc
        self.advice.taken()
        return Stored(
            batch.rejected + stored.rejected,
            "; ".join(filter(None, (batch.error_message, stored.error_message))),
        )


class ArrivingBody:
    """One OTLP/HTTP request's body while it arrives: its bytes count against the in-flight
    limit chunk by chunk as they come, never by what the request declares; the spans it is
    estimated to carry count against the queue limit once the whole body is there (it is
    then decoded). A sender declaring 16 MiB and sending nothing reserves nothing, and one
    that sends 16 MiB and stalls holds only its bytes (bounded by the in-flight limit, and
    given back at the progress timeout), never a share of the queue that would have every
    other export refused; `release` gives both counts back."""

    def __init__(self, admission: IngestAdmission) -> None:
        self._admission = admission
        self.held_bytes = 0
        self.held_spans = 0

    async def read(
        self, chunks: AsyncIterable[bytes], *, timeout: float, progress_timeout: float
    ) -> bytes:
        """The whole body. `BodyStalled` when no chunk came for `progress_timeout` seconds,
        TimeoutError when the whole body took over `timeout`, `InflightFull` when the next
        chunk would pass the in-flight limit (what arrived so far is held until
        `release`)."""
        admission = self._admission
        body = bytearray()
        iterator = aiter(chunks)
        with anyio.fail_after(timeout):
            while True:
                with anyio.move_on_after(progress_timeout) as waiting:
                    chunk = await anext(iterator, None)
                if waiting.cancelled_caught:
                    raise BodyStalled
                if chunk is None:
                    self.held_spans = admission.spans_per_byte.estimate(self.held_bytes)
                    admission.coming_spans += self.held_spans
                    return bytes(body)
                if not admission.bytes.try_acquire(len(chunk)):
                    raise InflightFull
                self.held_bytes += len(chunk)
                body += chunk

    def release(self) -> None:
        self._admission.bytes.release(self.held_bytes)
        self._admission.coming_spans -= self.held_spans
        self.held_bytes = self.held_spans = 0
