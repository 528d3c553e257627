"""The model side of `faultfinder bench run`: client settings from options and the
environment, a local model server for the run, and the out-of-fold pre-filter models."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from faultfinder.attributors.llm import ModelSettings
from faultfinder.attributors.local_model import LocalModelError, LocalModelServer
from faultfinder.benchmarks.datasets import BenchmarkRecord, DatasetError, load_dataset

__all__ = ["fold_models", "model_client_settings", "model_options", "terminate_cleanly"]


def model_options(
    model: str | None,
    base_url: str | None,
    api_key: str | None,
    overrides: Mapping[str, Any],
) -> dict[str, Any]:
    values = {"model": model, "base_url": base_url, "api_key": api_key, **overrides}
    return {key: value for key, value in values.items() if value is not None}


@contextmanager
def terminate_cleanly() -> Iterator[None]:
    """SIGTERM (kill) unwinds like Ctrl-C: results so far stay on disk, run.json is
    updated and a local model server is stopped instead of being left running."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def model_client_settings(
    is_llm: bool,
    local_model: str | None,
    given: Mapping[str, Any],
    out_dir: Path,
    n_ctx: int | None,
    threads: int,
    console: Console,
) -> Iterator[ModelSettings | None]:
    """Client settings: arguments, then OPENAI_*/FAULTFINDER_LLM_* variables, then defaults;
    with `local_model`, a server started for the block and stopped after it."""
    if not is_llm:
        yield None
        return
    if local_model is None:
        yield ModelSettings.from_environment(os.environ, **given)
        return
    from_environment = ModelSettings.from_environment(os.environ, **given)
    context = n_ctx or 8192
    out_dir.mkdir(parents=True, exist_ok=True)
    console.print(f"starting local model {local_model} (n_ctx {context}, {threads} threads) …")
    server = LocalModelServer(
        local_model,
        n_ctx=context,
        threads=threads,
        log_path=out_dir / "model-server.log",
        die_with_parent=True,
    )
    try:
        server.start()
    except LocalModelError as exc:
        server.stop()
        raise click.ClickException(str(exc)) from None
    try:
        # The local server decides where to call and what the model is called.
        kept = {
            key: value
            for key, value in from_environment.model_dump().items()
            if key not in {"base_url", "api_key", "model", "context_tokens"}
        }
        yield server.settings(**kept)
    finally:
        server.stop()


def fold_models(
    root: Path,
    records: Sequence[BenchmarkRecord],
    folds: int,
    seed: int,
    use_ground_truth: bool,
    console: Console,
) -> Any:
    """The out-of-fold pre-filter models for `records` (trained on the rest of Who&When)."""
    from faultfinder.benchmarks.prefilter import build_fold_models
    from faultfinder.benchmarks.train import require_training_packages

    require_training_packages()
    try:
        everything = list(load_dataset("who_and_when", root))
    except DatasetError as exc:
        raise click.ClickException(str(exc)) from None
    with console.status("training out-of-fold pre-filter models") as status:
        return build_fold_models(
            everything,
            records,
            folds=folds,
            seed=seed,
            use_ground_truth=use_ground_truth,
            on_fold=lambda done, total: status.update(
                f"training out-of-fold pre-filter models: {done} of {total} folds"
            ),
        )
