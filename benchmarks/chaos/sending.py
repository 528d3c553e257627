"""Sending chaos traffic as an OTLP exporter would: retry refused connections and 429/503
after Retry-After, and tally what was acknowledged, interrupted or given up."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

from faultfinder.benchmarks.chaos.traffic import ChaosRequest, SpanKey
from faultfinder.benchmarks.otlp_traces import PROTOBUF_CONTENT_TYPE, retry_after_seconds

__all__ = ["SendTally", "send_until_acknowledged"]

_THROTTLED = frozenset({429, 503})


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
    refusals = 0
    down_since: float | None = None
    while True:
        try:
            response = await client.post(
                url, content=request.body, headers={"content-type": PROTOBUF_CONTENT_TYPE}
            )
        except httpx.ConnectError:
            tally.connection_refused += 1
            down_since = down_since or time.monotonic()
            if time.monotonic() - down_since > max_down_s:
                tally.note(f"the sidecar refused connections for {max_down_s:g} s")
                break
            await asyncio.sleep(0.05)
            continue
        except httpx.TransportError as error:
            tally.transport_errors += 1
            tally.note(f"{type(error).__name__}: {error}")
            if retry_in_flight:
                await asyncio.sleep(0.2)
                continue
            tally.requests_interrupted += 1
            tally.interrupted.update(request.spans)
            return False
        down_since = None
        tally.statuses[response.status_code] += 1
        if response.status_code == 200:
            tally.requests_acknowledged += 1
            tally.acknowledged.update(request.spans)
            return True
        if response.status_code in _THROTTLED and refusals < max_refusals:
            refusals += 1
            header = response.headers.get("retry-after")
            if header is None:
                tally.throttled_without_retry_after += 1
            # Jitter keeps refused senders from coming back in lockstep.
            delay = retry_after_seconds(header, default=1.0, cap=30.0)
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
            continue
        tally.note(f"HTTP {response.status_code}: {response.text[:200]}")
        break
    tally.given_up.update(request.spans)
    return False
