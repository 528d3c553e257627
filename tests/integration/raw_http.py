"""Raw OTLP/HTTP uploads on a socket, for tests of senders that stall, trickle or declare
more than they send."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from tests.integration.sidecar import Sidecar


@contextmanager
def raw_upload(sidecar: Sidecar, head: str) -> Iterator[socket.socket]:
    """A connection that has sent `POST /v1/traces` with the extra header lines `head`
    (ending with a blank line where the body should start) and nothing else yet."""
    host, port = sidecar.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    try:
        sock.sendall(
            f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Type: application/x-protobuf\r\n{head}\r\n".encode()
        )
        yield sock
    finally:
        sock.close()


def answer_status(sock: socket.socket) -> int:
    """The status code of the answer on `sock` (waits for it)."""
    answer = b""
    while b"\r\n" not in answer:
        part = sock.recv(4096)
        if not part:
            raise AssertionError(f"connection closed without an answer: {answer!r}")
        answer += part
    return int(answer.split(b" ", 2)[1])
