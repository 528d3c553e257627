"""The model side of `faultfinder bench run`: which model options apply, client settings
from options and the environment, a local model server for the run, the model a run
records, and the learned pre-filter with its out-of-fold models."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import click
from rich.console import Console

from faultfinder.attributors.llm import ModelSettings
from faultfinder.attributors.llm.methods import LLM_METHODS
from faultfinder.attributors.local_model import (
    LocalModelError,
)
from faultfinder.attributors.local_server import (
    LocalModelServer,
)
from faultfinder.datasets import BenchmarkRecord, DatasetError, load_dataset
from faultfinder.evaluation.run.checkpoint import ResumeMismatch, check_identity, read_run_file

__all__ = [
    "check_model_options",
    "fold_models",
    "model_client_settings",
    "model_options",
    "prefilter_folds",
    "prefilter_settings",
    "recorded_model",
    "terminate_cleanly",
]


def model_options(
    model: str | None,
    base_url: str | None,
    api_key: str | None,
    overrides: Mapping[str, Any],
) -> dict[str, Any]:
    values = {"model": model, "base_url": base_url, "api_key": api_key, **overrides}
    return {key: value for key, value in values.items() if value is not None}


def check_model_options(
    attributor: str, given: Mapping[str, Any], local_model: str | None, names_endpoint: bool
) -> None:
    """Model options only for the LLM methods; a local model only without an endpoint."""
    if attributor not in LLM_METHODS and (given or local_model):
        raise click.UsageError(
            f"model options apply to the LLM methods ({', '.join(LLM_METHODS)}), not {attributor!r}"
        )
    if local_model is not None and names_endpoint:
        raise click.UsageError(
            "--local-model serves its own endpoint; drop --model/--base-url/--api-key"
        )


def prefilter_folds(
    attributor: str, dataset: str, top_k: int | None, folds: int | None
) -> int | None:
    """The folds of the out-of-fold pre-filter models: --prefilter-cv, 5 by default with
    --prefilter on Who&When, None elsewhere; --prefilter only for the methods taking hints."""
    on_who_and_when = dataset.strip().lower().split(":")[0] == "who_and_when"
    if top_k is not None and (attributor not in LLM_METHODS or attributor == "step_by_step"):
        raise click.UsageError(
            "--prefilter applies to the LLM methods that take hints"
            f" ({', '.join(m for m in LLM_METHODS if m != 'step_by_step')}), not {attributor!r}"
        )
    if folds is not None and (top_k is None or not on_who_and_when):
        raise click.UsageError("--prefilter-cv needs --prefilter and a who_and_when dataset")
    if top_k is not None and on_who_and_when:
        return folds or 5
    return folds


@contextmanager
def terminate_cleanly() -> Iterator[None]:
    """SIGTERM (kill) unwinds like Ctrl-C: results so far stay on disk, run.json is
    updated and a local model server is stopped instead of being left running.

    It is handed to whatever handles Ctrl-C at that moment: inside `asyncio.run` that is
    the runner's own handler, which cancels the main task so that it unwinds through its
    awaits (a KeyboardInterrupt raised at an arbitrary point of the event loop's own code
    can leave the loop unable to finish, and the command hanging); elsewhere Python's
    default, which raises KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        on_ctrl_c = signal.getsignal(signal.SIGINT)
        if callable(on_ctrl_c):
            on_ctrl_c(signal.SIGINT, frame)
            return
        raise KeyboardInterrupt  # Ctrl-C ignored here (a background job): stop all the same

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
    from faultfinder.evaluation.prefilter import build_fold_models
    from faultfinder.training.command import require_training_packages

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


def prefilter_settings(
    top_k: int | None,
    folds: int | None,
    seed: int,
    *,
    resumed_dir: Path | None,
    root: Path,
    records: list[BenchmarkRecord],
    use_ground_truth: bool,
    console: Console,
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The learned pre-filter as the run's identity records it (None when off), and the
    attributor options that turn it on. With `folds`, the out-of-fold models are trained,
    once `resumed_dir` (the directory a run continues, if any) is known to hold this
    pre-filter's results or none."""
    if top_k is None:
        return None, {}
    prefilter: dict[str, Any] = {"top_k": top_k, "cv_folds": folds, "cv_seed": None}
    config: dict[str, Any] = {"prefilter_top_k": top_k}
    if folds is not None:
        prefilter["cv_seed"] = seed
        # A directory whose hints came from folds split otherwise (before folds kept a
        # task's runs together) must not be continued with these.
        from faultfinder.training import FOLDS_BY

        prefilter["cv_folds_by"] = FOLDS_BY
        if resumed_dir is not None:
            _refuse_other_prefilter(resumed_dir, prefilter)
        config["prefilter_model"] = fold_models(
            root, records, folds, seed, use_ground_truth, console
        )
    return prefilter, config


def _refuse_other_prefilter(out_dir: Path, prefilter: Mapping[str, Any]) -> None:
    """Refuse a directory made with another pre-filter before spending time on training."""
    try:
        recorded = read_run_file(out_dir)
        if recorded is not None:
            identity = recorded["identity"]
            check_identity(out_dir, identity, {**identity, "prefilter": prefilter})
    except ResumeMismatch as exc:
        raise click.ClickException(str(exc)) from None


def recorded_model(
    model_settings: ModelSettings | None, local_model: str | None
) -> tuple[str | None, dict[str, Any]]:
    """The model's identity (the local model or the endpoint's model name) and the client
    settings summary.json records (without the key); None and nothing for other methods."""
    if model_settings is None:
        return None, {}
    recorded = model_settings.model_dump(mode="json", exclude={"api_key"})
    if local_model is not None:
        recorded["local_model"] = local_model
    return local_model or model_settings.model, recorded
