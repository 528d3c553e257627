"""The chaos drills' senders retry as an OTLP exporter would, and the httpx and aiohttp ones
alike: 503 after Retry-After until acknowledged, refused connections for a while, and a
request left unanswered counted as interrupted."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from faultfinder.drills.chaos.sending import (
    SendTally,
    aiohttp_session,
    send_until_acknowledged,
    send_until_acknowledged_aiohttp,
)
from faultfinder.drills.chaos.traffic import ChaosRequest, ChaosTraffic

pytest.importorskip("aiohttp")

Send = Callable[..., Awaitable[bool]]


@asynccontextmanager
async def _sender(kind: str) -> AsyncIterator[Send]:
    """A `send_until_acknowledged(url, request, tally, **options)` over httpx or aiohttp."""
    if kind == "httpx":
        async with httpx.AsyncClient(timeout=10) as client:

            async def send_httpx(
                url: str, request: ChaosRequest, tally: SendTally, **options: Any
            ) -> bool:
                sent: bool = await send_until_acknowledged(client, url, request, tally, **options)
                return sent

            yield send_httpx
    else:
        async with aiohttp_session(8) as session:

            async def send_aiohttp(
                url: str, request: ChaosRequest, tally: SendTally, **options: Any
            ) -> bool:
                sent: bool = await send_until_acknowledged_aiohttp(
                    session, url, request, tally, **options
                )
                return sent

            yield send_aiohttp


@asynccontextmanager
async def _server(answers: list[bytes | None]) -> AsyncIterator[str]:
    """A server reading one request per connection and giving the next of `answers`; at
    None, or once they run out, it hangs up without an answer."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        reply = answers.pop(0) if answers else None
        if reply is not None:
            writer.write(reply)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}/v1/traces"


def _response(status: str, *headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Content-Length: 0", "Connection: close", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _request() -> ChaosRequest:
    return ChaosTraffic(steps_per_run=2, failed_interval_s=None).next_request()


@pytest.mark.parametrize("kind", ["httpx", "aiohttp"])
async def test_503_is_retried_after_retry_after_until_acknowledged(kind: str) -> None:
    refused = _response("503 Service Unavailable", "Retry-After: 0")
    request, tally = _request(), SendTally()
    async with _server([refused, refused, _response("200 OK")]) as url, _sender(kind) as send:
        assert await send(url, request, tally)
    assert tally.statuses == {503: 2, 200: 1}
    assert tally.acknowledged == set(request.spans)
    assert tally.requests_acknowledged == 1
    assert tally.throttled_without_retry_after == 0
    assert not tally.given_up


@pytest.mark.parametrize("kind", ["httpx", "aiohttp"])
async def test_too_many_refusals_give_the_request_up(kind: str) -> None:
    refused = _response("503 Service Unavailable", "Retry-After: 0")
    request, tally = _request(), SendTally()
    async with _server([refused] * 3) as url, _sender(kind) as send:
        assert not await send(url, request, tally, max_refusals=2)
    assert tally.statuses == {503: 3}
    assert tally.given_up == set(request.spans)
    assert not tally.acknowledged


@pytest.mark.parametrize("kind", ["httpx", "aiohttp"])
async def test_a_sidecar_that_stays_down_is_given_up_on(kind: str) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1/traces"
    request, tally = _request(), SendTally()
    async with _sender(kind) as send:
        assert not await send(url, request, tally, max_down_s=0.2)
    assert tally.connection_refused >= 2
    assert tally.given_up == set(request.spans)
    assert tally.transport_errors == 0


@pytest.mark.parametrize("kind", ["httpx", "aiohttp"])
async def test_an_unanswered_request_is_interrupted_or_sent_again(kind: str) -> None:
    request, tally = _request(), SendTally()
    async with _server([]) as url, _sender(kind) as send:
        assert not await send(url, request, tally)
    assert tally.interrupted == set(request.spans)
    assert tally.requests_interrupted == 1 and tally.transport_errors == 1
    assert not tally.given_up

    tally = SendTally()
    async with _server([None, _response("200 OK")]) as url, _sender(kind) as send:
        assert await send(url, request, tally, retry_in_flight=True)
    assert tally.acknowledged == set(request.spans)
    assert tally.transport_errors == 1
    assert not tally.interrupted
