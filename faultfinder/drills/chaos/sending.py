"""Sending chaos traffic as an OTLP exporter would: retry refused connections and 429/503
after Retry-After, and tally what was acknowledged, interrupted or given up."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx

from faultfinder.drills.chaos.traffic import ChaosRequest, SpanKey
from faultfinder.evaluation.replay.otlp_http import PROTOBUF_CONTENT_TYPE, retry_after_seconds

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "SendTally",
    "aiohttp_session",
    "send_until_acknowledged",
    "send_until_acknowledged_aiohttp",
]

_THROTTLED = frozenset({429, 503})

MAX_RETRY_AFTER_S = 300.0
"""The longest Retry-After the senders honour, as an OpenTelemetry Collector exporter
(which keeps retrying for 300 s by default) would."""


@dataclass
class SendTally:
    """What the senders saw."""

    acknowledged: set[SpanKey] = field(default_factory=set)
    requests_acknowledged: int = 0
    interrupted: set[SpanKey] = field(default_factory=set)
    """Spans of requests sent but never answered (the process died holding them)."""
    requests_interrupted: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    throttled_without_retry_after: int = 0
    connection_refused: int = 0
    transport_errors: int = 0
    """Requests sent that got no answer (retried or counted as interrupted)."""
    given_up: set[SpanKey] = field(default_factory=set)
    """Spans of requests abandoned after too many refusals (never acknowledged)."""
    errors: list[str] = field(default_factory=list)

    def note(self, message: str) -> None:
        if len(self.errors) < 10 and message not in self.errors:
            self.errors.append(message)


async def send_until_acknowledged(
    client: httpx.AsyncClient,
    url: str,
    request: ChaosRequest,
    tally: SendTally,
    *,
    max_refusals: int = 200,
    max_down_s: float = 120.0,
    retry_in_flight: bool = False,
) -> bool:
    """POST until acknowledged, as an OTLP exporter would; True when acknowledged.

    Refused connections (the sidecar is down, for up to `max_down_s`) and 429/503 (up to
    `max_refusals`) are retried with the same body. A request that was sent but got no
    answer is counted as interrupted and, unless `retry_in_flight`, not sent again, so
    that its spans stay unacknowledged.
    """
    waits = _Waits(max_refusals, max_down_s)
    while True:
        try:
            response = await client.post(
                url, content=request.body, headers={"content-type": PROTOBUF_CONTENT_TYPE}
            )
        except httpx.ConnectError:
            if await waits.refused(tally):
                continue
            break
        except httpx.TransportError as error:
            if await waits.unanswered(error, request, tally, retry_in_flight=retry_in_flight):
                continue
            return False
        if waits.answered(response.status_code, request, tally):
            return True
        if await waits.throttled(response.status_code, response.headers.get("retry-after"), tally):
            continue
        tally.note(f"HTTP {response.status_code}: {response.text[:200]}")
        break
    tally.given_up.update(request.spans)
    return False


async def send_until_acknowledged_aiohttp(
    session: aiohttp.ClientSession,
    url: str,
    request: ChaosRequest,
    tally: SendTally,
    *,
    max_refusals: int = 200,
    max_down_s: float = 120.0,
    retry_in_flight: bool = False,
) -> bool:
    """`send_until_acknowledged` over aiohttp, for the overload drill's load generator.

    A sender that must offer twice a sidecar's capacity from one core cannot afford httpx:
    its connection pool rescans every waiting request whenever a connection frees up, which
    under overload (hundreds of requests waiting on retries) took most of the generator's CPU.
    aiohttp hands a freed connection to the next waiter directly. Same retries and tally.

    Each attempt carries `request` as its `trace_request_ctx`, so that the session's trace
    hooks can tell which request went out when.
    """
    import aiohttp

    waits = _Waits(max_refusals, max_down_s)
    while True:
        try:
            async with session.post(
                url, data=request.body, headers=_PROTOBUF_HEADERS, trace_request_ctx=request
            ) as response:
                status = response.status
                retry_after = response.headers.get("retry-after")
                # Read to the end, so that the connection goes back to the pool.
                answer = await response.read()
        except aiohttp.ClientConnectorError:
            if await waits.refused(tally):
                continue
            break
        except (aiohttp.ClientError, TimeoutError) as error:
            if await waits.unanswered(error, request, tally, retry_in_flight=retry_in_flight):
                continue
            return False
        if waits.answered(status, request, tally):
            return True
        if await waits.throttled(status, retry_after, tally):
            continue
        tally.note(f"HTTP {status}: {answer[:200].decode(errors='replace')}")
        break
    tally.given_up.update(request.spans)
    return False


_PROTOBUF_HEADERS = {"content-type": PROTOBUF_CONTENT_TYPE}


@dataclass
class _Waits:
    """What one request's sender does after each attempt, whichever HTTP client sent it:
    how long it waits before trying again, when it gives up, and what it tallies."""

    max_refusals: int
    max_down_s: float
    refusals: int = 0
    down_since: float | None = None

    async def refused(self, tally: SendTally) -> bool:
        """The connection was refused: whether to try again (after a short wait)."""
        tally.connection_refused += 1
        self.down_since = self.down_since or time.monotonic()
        if time.monotonic() - self.down_since > self.max_down_s:
            tally.note(f"the sidecar refused connections for {self.max_down_s:g} s")
            return False
        await asyncio.sleep(0.05)
        return True

    async def unanswered(
        self,
        error: BaseException,
        request: ChaosRequest,
        tally: SendTally,
        *,
        retry_in_flight: bool,
    ) -> bool:
        """The request was sent but not answered: whether to send it again. If not, its spans
        are counted as interrupted."""
        tally.transport_errors += 1
        tally.note(f"{type(error).__name__}: {error}")
        if retry_in_flight:
            await asyncio.sleep(0.2)
            return True
        tally.requests_interrupted += 1
        tally.interrupted.update(request.spans)
        return False

    def answered(self, status: int, request: ChaosRequest, tally: SendTally) -> bool:
        """Tally an answer; whether it acknowledged the request."""
        self.down_since = None
        tally.statuses[status] += 1
        if status == 200:
            tally.requests_acknowledged += 1
            tally.acknowledged.update(request.spans)
            return True
        return False

    async def throttled(self, status: int, retry_after: str | None, tally: SendTally) -> bool:
        """Whether to try again after a refusal (429/503), waiting as Retry-After asks."""
        if status not in _THROTTLED or self.refusals >= self.max_refusals:
            return False
        self.refusals += 1
        if retry_after is None:
            tally.throttled_without_retry_after += 1
        # Jitter keeps refused senders from coming back in lockstep.
        delay = retry_after_seconds(retry_after, default=1.0, cap=MAX_RETRY_AFTER_S)
        await asyncio.sleep(delay * random.uniform(0.5, 1.5))
        return True


def aiohttp_session(
    max_connections: int, trace_configs: list[aiohttp.TraceConfig] | None = None
) -> aiohttp.ClientSession:
    """An aiohttp session for `send_until_acknowledged_aiohttp` holding at most
    `max_connections` connections; to be used as `async with`, in a running event loop.

    aiohttp is a development dependency: the drills that need it say so when it is missing.
    """
    try:
        import aiohttp
    except ModuleNotFoundError as error:
        raise RuntimeError(
            "the overload drill's load generator needs aiohttp: "
            "pip install 'faultfinder[dev]' (or pip install aiohttp)"
        ) from error
    connector = aiohttp.TCPConnector(
        limit=max_connections,
        # Drop idle connections well before the server's keep-alive timeout (the sidecar's
        # 75 s, uvicorn's 5 s elsewhere), so that a request is not sent on a connection the
        # server is closing (an unanswered request).
        keepalive_timeout=2.0,
    )
    # No overall deadline: under overload a request may wait long for a free connection.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=False,
        raise_for_status=False,
        trace_configs=trace_configs,
    )
