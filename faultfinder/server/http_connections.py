"""The HTTP server's connection protocol: uvicorn's httptools protocol with a deadline for
each request head and a cap on the connections one client address may hold open.

uvicorn times out only idle keep-alive connections; a connection that opens and sends a
request head byte by byte, never ending it (slowloris), is kept until the client goes,
and enough of them take every file descriptor: new connections, `/healthz` included, then
time out. `limit_concurrency` does not help (it answers 503 only once a head is complete,
and counts every client alike). The deadline is armed when a connection opens and when a
new request begins, and disarmed when its head is complete, so only the head is timed:
bodies have their own limits in the OTLP receiver, and a request being answered or a
connection waiting between requests is left to the handlers and the keep-alive timeout.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["GuardedHttpProtocol", "guarded_protocol"]

_HEAD_TIMEOUT_ANSWER = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\n"
    b"connection: close\r\ncontent-length: 31\r\n\r\nthe request head came too late\n"
)
_TOO_MANY_ANSWER = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\nretry-after: 1\r\n"
    b"connection: close\r\ncontent-length: 40\r\n\r\ntoo many connections from this address\n"
)


class GuardedHttpProtocol(HttpToolsProtocol):
    """One HTTP/1.1 connection, closed with 408 when a request head takes longer than
    `head_timeout` seconds, and refused with 503 when its client address already holds
    `max_per_client` connections (0: no cap)."""

    head_timeout: ClassVar[float] = 10.0
    max_per_client: ClassVar[int] = 0
    open_per_client: ClassVar[Counter[str]] = Counter()
    """Open connections by client address, for the cap (one server per process)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._counted: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = self.client[0] if self.client else None
        if address is not None and self.max_per_client:
            if self.open_per_client[address] >= self.max_per_client:
                transport.write(_TOO_MANY_ANSWER)
                transport.close()
                return
            self.open_per_client[address] += 1
            self._counted = address
        self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        if self._counted is not None:
            self.open_per_client[self._counted] -= 1
            if not self.open_per_client[self._counted]:
                del self.open_per_client[self._counted]
            self._counted = None
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_head_deadline()

    def on_headers_complete(self) -> None:
        self._disarm_head_deadline()
        super().on_headers_complete()

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        self._head_deadline = self.loop.call_later(self.head_timeout, self._head_too_late)

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_late(self) -> None:
        self._head_deadline = None
        if not self.transport.is_closing():
            self.transport.write(_HEAD_TIMEOUT_ANSWER)
            self.transport.close()


def guarded_protocol(head_timeout: float, max_per_client: int) -> type[GuardedHttpProtocol]:
    """The protocol class to give uvicorn (`http=`), with these limits."""
    return type(
        "GuardedHttpProtocol",
        (GuardedHttpProtocol,),
        {
            "head_timeout": head_timeout,
            "max_per_client": max_per_client,
            "open_per_client": Counter(),
        },
    )
