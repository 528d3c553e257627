"""Start a real `faultfinder serve` process on free loopback ports for integration tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

FAULTFINDER = Path(
    os.environ.get("FAULTFINDER_BIN") or Path(sys.executable).with_name("faultfinder")
)
"""The `faultfinder` command: this interpreter's, or `$FAULTFINDER_BIN` (the conformance
suite runs in framework environments without the server and points here at the main one)."""
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class Sidecar:
    url: str
    grpc_endpoint: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return _read(self.log_path)


def _environment(database_url: str, env: dict[str, str]) -> dict[str, str]:
    # The repository root on PYTHONPATH lets FAULTFINDER_PLUGINS name test plugins.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "FAULTFINDER_DATABASE_URL": database_url, **env}


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _read(log_path: Path) -> str:
    return log_path.read_text(errors="replace")


def _answers_readyz(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _wait_until(
    ready: Callable[[], bool], process: subprocess.Popen[bytes], log_path: Path, what: str
) -> None:
    """Poll `ready` until it holds; fail with the process's log if it exits or 60 s pass."""
    deadline = time.monotonic() + 60
    while not ready():
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{_read(log_path)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after 60 s:\n{_read(log_path)}")
        time.sleep(0.05)


def spawned_children(pid: int) -> list[int]:
    """The processes `pid` started with multiprocessing's spawn (`serve --processes`: the
    online auditor's, the decoders'), not multiprocessing's own resource tracker."""
    # Each thread lists the children it started (the auditor's is started from a worker
    # thread).
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            children += (task / "children").read_text().split()
    return [
        int(child)
        for child in children
        if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()
    ]


@contextmanager
def running_worker(
    database_url: str, tmp_path: Path, **env: str
) -> Iterator[subprocess.Popen[bytes]]:
    """A `faultfinder worker` process, yielded once it has said it is running its job slots
    (so a test's jobs do not all go to whichever worker happened to start first); stopped
    with SIGTERM at exit (if still alive)."""
    log_path = tmp_path / f"worker-{len(list(tmp_path.glob('worker-*.log')))}.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [str(FAULTFINDER), "worker"],
            env=_environment(database_url, env),
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_until(lambda: "job slot(s)" in _read(log_path), process, log_path, "worker")
        yield process
    finally:
        _stop(process)


@contextmanager
def running_sidecar(database_url: str, tmp_path: Path, **env: str) -> Iterator[Sidecar]:
    """A sidecar process on free ports; stopped with SIGTERM (clean shutdown) at exit."""
    port, grpc_port = free_port(), free_port()
    log_path = tmp_path / f"sidecar-{port}.log"
    environment = _environment(database_url, env)
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [str(FAULTFINDER), "serve", "--port", str(port), "--grpc-port", str(grpc_port)],
            env=environment,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    sidecar = Sidecar(f"http://127.0.0.1:{port}", f"127.0.0.1:{grpc_port}", process, log_path)
    try:
        _wait_until(lambda: _answers_readyz(sidecar.url), process, log_path, "sidecar")
        yield sidecar
    finally:
        _stop(process)


@contextmanager
def quick_sidecar(folder: Path, **env: str) -> Iterator[Sidecar]:
    """`running_sidecar` on a SQLite file in `folder`, settling a quiet run within a second
    (quiet period 0.3 s, a sweep every 0.1 s)."""
    with running_sidecar(
        f"sqlite+aiosqlite:///{folder / 'faultfinder.db'}",
        folder,
        FAULTFINDER_QUIET_PERIOD="0.3",
        FAULTFINDER_SWEEP_INTERVAL="0.1",
        **env,
    ) as sidecar:
        yield sidecar
