"""Start and stop the real local model server (llama-cpp-python) for tests that need a model."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from faultfinder.attributors.local_model import (
    LocalModelError,
    locate_model,
)
from faultfinder.attributors.local_server import (
    LocalModelServer,
    ServerAddress,
    runtime_missing,
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def running_local_model(
    model: str, log_dir: Path, *, n_ctx: int = 4096, attempts: int = 3
) -> Iterator[LocalModelServer]:
    """A started server for `model` on a free loopback port; skips the test when the
    runtime or the model package is not installed.

    A port taken between choosing and binding makes the server exit early; another free
    port is tried. Leaving stops the process and waits for it to exit.
    """
    problem = runtime_missing()
    if problem is not None:
        pytest.skip(problem)
    try:
        locate_model(model)
    except LocalModelError as exc:
        pytest.skip(str(exc))
    for attempt in range(attempts):
        port = free_port()
        server = LocalModelServer(
            model,
            address=ServerAddress(port=port),
            n_ctx=n_ctx,
            log_path=log_dir / f"llm-{model}-{port}.log",
            startup_timeout=180,
            die_with_parent=True,
        )
        try:
            server.start()
        except LocalModelError:
            if attempt + 1 < attempts and "address already in use" in server.log().lower():
                continue
            raise
        try:
            yield server
        finally:
            server.stop()
        return
