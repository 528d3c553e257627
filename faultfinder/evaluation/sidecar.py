"""A `faultfinder serve` process on a loopback port for the benchmarks that drive a real
sidecar: started with given settings, ready once /readyz answers, logging to a file,
stopped cleanly or killed outright, and restartable on the same port and database."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Mapping
from pathlib import Path

import httpx

__all__ = ["SidecarProcess", "faultfinder_command", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def faultfinder_command() -> list[str]:
    """The `faultfinder` command beside this interpreter, else on PATH, else via `-c`."""
    beside = Path(sys.executable).with_name("faultfinder")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("faultfinder")
    if found:
        return [found]
    return [sys.executable, "-c", "from faultfinder.cli import main; main()"]


class SidecarProcess:
    """A `faultfinder serve` process on a fixed loopback port that can be killed and restarted."""

    def __init__(
        self,
        database_url: str,
        log_dir: Path,
        *,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        grpc_port: int | None = None,
        ready_timeout: float = 120.0,
        cpus: Collection[int] | None = None,
    ) -> None:
        """`grpc_port`: serve OTLP/gRPC there too (default: HTTP only). `cpus`: run the
        process (and every thread it starts) on these cores only (`taskset`)."""
        self.database_url = database_url
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.grpc_port = grpc_port
        self.grpc_target = f"127.0.0.1:{grpc_port}" if grpc_port else None
        self.log_path = log_dir / f"sidecar-{self.port}.log"
        self._env = dict(env or {})
        self._ready_timeout = ready_timeout
        self.cpus = sorted(cpus) if cpus is not None else None
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("the sidecar is not running")
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self) -> float:
        """Start the process and wait until /readyz answers; returns the seconds it took."""
        started = time.monotonic()
        environment = {**os.environ, "FAULTFINDER_DATABASE_URL": self.database_url, **self._env}
        with self.log_path.open("ab") as log_file:
            log_file.write(f"\n--- start {self.starts + 1} ---\n".encode())
            log_file.flush()
            grpc = ["--grpc-port", str(self.grpc_port)] if self.grpc_port else ["--no-grpc"]
            pinned = ["taskset", "--cpu-list", ",".join(map(str, self.cpus))] if self.cpus else []
            self.process = subprocess.Popen(
                [*pinned, *faultfinder_command(), "serve", "--port", str(self.port), *grpc],
                env=environment,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        self.starts += 1
        deadline = started + self._ready_timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"sidecar exited with {self.process.returncode}; log {self.log_path}:\n"
                    + self.log()[-3000:]
                )
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return time.monotonic() - started
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"sidecar not ready after {self._ready_timeout:g} s")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, the writer's queue dies with the process."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        """SIGTERM (clean shutdown: the queue is drained), SIGKILL after 30 s."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> SidecarProcess:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
