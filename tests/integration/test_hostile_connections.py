"""Connections that never finish their request heads (slowloris) on a real sidecar.

Each is closed with 408 once `FAULTFINDER_HEAD_TIMEOUT` passes, and one client address
holds at most `FAULTFINDER_MAX_CONNECTIONS_PER_CLIENT` connections (more get 503 and are
closed), so thousands of them neither take the sidecar's file descriptors nor keep
`/healthz` from answering other clients. The attacker's connections come from another
loopback address (127.0.0.2) than the health checks (127.0.0.1).
"""

from __future__ import annotations

import resource
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from tests.integration.sidecar import Sidecar, running_sidecar

SLOWLORIS = 5_000
SIDECAR_FILES = 1_024
"""The sidecar's file descriptor limit: fewer than the attacker's connections."""
CAP = 64


@contextmanager
def _file_limit(soft: int) -> Iterator[None]:
    """This process's (and the processes it starts') soft file descriptor limit."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, before[1]), before[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)


def _slow_head(sidecar: Sidecar) -> socket.socket:
    host, port = sidecar.url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.settimeout(30)
    sock.bind(("127.0.0.2", 0))
    sock.connect((host, int(port)))
    sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nX-Waiting: ".encode())
    return sock


def _response(sock: socket.socket) -> int:
    """The status of one whole response on `sock` (head and Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(4096)
    return int(head.split(b" ", 2)[1])


def _answer(sock: socket.socket) -> int:
    """The status of the answer on `sock`; 0 for a connection closed without one."""
    answer = b""
    try:
        while b"\r\n" not in answer:
            part = sock.recv(4096)
            if not part:
                break
            answer += part
    except ConnectionResetError:
        return 0
    return int(answer.split(b" ", 2)[1]) if b"\r\n" in answer else 0


def test_slowloris_heads_neither_exhaust_files_nor_stop_healthz(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    # Our own limit must hold every attacking socket; with a lower hard limit, fewer
    # connections (still more than the sidecar's files) show the same.
    attackers = min(SLOWLORIS, hard - 200)
    assert attackers > SIDECAR_FILES, f"the hard file limit {hard} is too low for this test"
    env = {
        "FAULTFINDER_HEAD_TIMEOUT": "2",
        "FAULTFINDER_MAX_CONNECTIONS_PER_CLIENT": str(CAP),
    }
    with _file_limit(SIDECAR_FILES):
        context = running_sidecar(sqlite_database_url, tmp_path, **env)
        sidecar = context.__enter__()
    try:
        with _file_limit(hard), ExitStack() as stack:
            heads = [stack.enter_context(_slow_head(sidecar)) for _ in range(attackers)]
            for _ in range(10):
                assert httpx.get(f"{sidecar.url}/healthz", timeout=3).status_code == 200
                time.sleep(0.1)
            answers = [_answer(sock) for sock in heads]
            # At most CAP at a time were let in, each closed with 408 at its head deadline;
            # the rest were refused at once (503), or reset while the backlog was full.
            assert CAP <= answers.count(408) < attackers // 2, answers.count(408)
            assert set(answers) <= {408, 503, 0}
        assert httpx.get(f"{sidecar.url}/healthz", timeout=3).status_code == 200
    finally:
        context.__exit__(None, None, None)


def test_a_head_finished_in_time_is_answered(sqlite_database_url: str, tmp_path: Path) -> None:
    env = {"FAULTFINDER_HEAD_TIMEOUT": "2"}
    with running_sidecar(sqlite_database_url, tmp_path, **env) as sidecar:
        host, port = sidecar.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            for part in (b"GET /healthz HTTP/1.1\r\n", f"Host: {host}\r\n".encode(), b"\r\n"):
                sock.sendall(part)
                time.sleep(0.5)  # slow, but the whole head within the deadline
            assert _response(sock) == 200
            # Idle between requests is the keep-alive timeout's business, not the head's.
            time.sleep(3)
            sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            assert _response(sock) == 200
