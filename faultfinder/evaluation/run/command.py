"""The click command `faultfinder bench run`: resolves the options (dataset, record
subset, model endpoint or local model server), shows progress and prints the summary."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import click
from rich.console import Console
from rich.table import Table

from faultfinder.attributors.base import (
    Attributor,
    UnknownAttributorError,
    available_attributors,
    close_attributor,
    get_attributor,
)
from faultfinder.attributors.llm.methods import LLM_METHODS
from faultfinder.attributors.local_model import (
    LOCAL_MODELS,
)
from faultfinder.attributors.scoring import OVERALL
from faultfinder.datasets import (
    DATASETS_DIR_ENV,
    SPEC_HELP,
    BenchmarkRecord,
    DatasetError,
    load_dataset,
    resolve_datasets_dir,
)
from faultfinder.evaluation.run.attribution import BenchmarkSettings
from faultfinder.evaluation.run.benchmark import run_benchmark
from faultfinder.evaluation.run.checkpoint import RESULTS_FILE, ResumeMismatch
from faultfinder.evaluation.run.models import (
    check_model_options,
    model_client_settings,
    model_options,
    prefilter_folds,
    prefilter_settings,
    recorded_model,
    terminate_cleanly,
)
from faultfinder.evaluation.run.progress import attribution_progress
from faultfinder.evaluation.run.selection import load_records
from faultfinder.evaluation.subsets import FIXED_SUBSET_SEED
from faultfinder.server.progress import table_console

__all__ = ["run_command"]


def _default_out_dir(dataset: str, attributor: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    # A dataset may be a path (absolute, or with folders): one flat name under bench-out/.
    slug = re.sub(r"[^A-Za-z0-9_.]+", "-", dataset).strip("-.") or "dataset"
    base = Path("bench-out") / f"{slug}-{attributor}-{stamp}"
    candidate, suffix = base, 1
    while candidate.exists():
        suffix += 1
        candidate = base.with_name(f"{base.name}-{suffix}")
    return candidate


def _summary_table(summary: Mapping[str, Any]) -> Table:
    repeats = int(summary["settings"]["repeats"])
    table = Table(title=f"{summary['attributor']} on {summary['dataset']}")
    for column in (
        "subset", "n", "agent %", "step %", "±1 %", "±3 %", "±5 %",
        "official agent %", "official step %", "random expected agent/step %",
    ):  # fmt: skip
        table.add_column(column, justify="left" if column == "subset" else "right")

    def pct(metric: Mapping[str, float]) -> str:
        text = f"{100 * metric['mean']:.1f}"
        return text + f" ±{100 * metric['std']:.1f}" if repeats > 1 else text

    for name, subset in summary["subsets"].items():
        accuracy = subset["accuracy"]
        expected = subset["random_expected"]
        table.add_row(
            name,
            str(subset["n"]),
            *(pct(accuracy[key]) for key in ("agent", "step", "step_pm1", "step_pm3", "step_pm5")),
            pct(accuracy["official_agent"]),
            pct(accuracy["official_step"]),
            f"{100 * expected['agent']:.1f} / {100 * expected['step']:.1f}",
        )
    return table


def _print_summary(summary: Mapping[str, Any], out_dir: Path) -> None:
    """The summary table, the run's cost and the files written."""
    table_console().print(_summary_table(summary))
    cost = summary["subsets"][OVERALL]["cost"]
    click.echo(
        f"records completed {summary['records_completed']} (this session"
        f" {summary['attributed_this_session']}); LLM calls {cost['total_llm_calls']},"
        f" prompt tokens {cost['total_prompt_tokens']}, completion tokens"
        f" {cost['total_completion_tokens']}; {cost['mean_latency_s']:.1f} s/record,"
        f" wall time {summary['wall_time_s']:.1f} s"
    )
    click.echo(
        "random expected = analytical accuracy of a uniform random agent/step on these records"
    )
    click.echo(
        f"wrote {out_dir / RESULTS_FILE}, {out_dir / 'summary.json'}, {out_dir / 'report.md'},"
        f" {out_dir / 'report.html'}"
    )


def _check_attributor(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value not in available_attributors():
        raise click.BadParameter(
            f"unknown attributor {value!r}; available: {', '.join(available_attributors())}",
            ctx=ctx,
            param=param,
        )
    return value


@click.command(name="run")
@click.option(
    "--dataset",
    required=True,
    help=f"The labelled records: {SPEC_HELP}.",
)
@click.option(
    "--attributor",
    required=True,
    callback=_check_attributor,
    help="Registered attributor name, e.g. random, first_error, all_at_once, a2p.",
)
@click.option(
    "--with-ground-truth/--without-ground-truth",
    default=True,
    show_default=True,
    help="Whether the method may see the task's correct answer.",
)
@click.option("--limit", type=click.IntRange(min=1), help="At most N records per subset.")
@click.option(
    "--records",
    "records_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Only the record ids listed in FILE (one per line, # comments allowed).",
)
@click.option(
    "--fraction",
    help="Only a fixed fraction (e.g. 1/3) of each subset, chosen by --subset-seed.",
)
@click.option(
    "--subset-seed", type=int, default=FIXED_SUBSET_SEED, show_default=True,
    help="Seed that picks the --fraction records (sorted ids shuffled, first round(n×f)).",
)  # fmt: skip
@click.option(
    "--concurrency", type=click.IntRange(min=1),
    help="Records attributed at the same time (default 4; 1 with --local-model). A single"
    " local llama.cpp server answers one request at a time: use 1 with it.",
)  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the first repeat.")
@click.option(
    "--repeats", type=click.IntRange(min=1), default=1, show_default=True,
    help="Passes over the data with seeds S..S+K-1; the summary gives mean and spread.",
)  # fmt: skip
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Output directory (default bench-out/<dataset>-<attributor>-<timestamp>/).",
)
@click.option(
    "--resume/--no-resume",
    default=True,
    show_default=True,
    help="Continue the run in --out: skip records (per seed) already in its results.jsonl,"
    " append the rest; --no-resume starts the directory over.",
)
@click.option(
    "--local-model",
    type=click.Choice(sorted(LOCAL_MODELS)),
    help="Start this local model server for the run and stop it after (LLM methods).",
)
@click.option(
    "--local-threads", type=click.IntRange(min=1), default=2, show_default=True,
    help="CPU threads of the --local-model server. On a busy 2-core machine 1 generates"
    " several times faster than 2 (the threads wait on each other).",
)  # fmt: skip
@click.option("--model", help="Model name for LLM methods (FAULTFINDER_LLM_MODEL).")
@click.option("--base-url", help="OpenAI-compatible endpoint ending in /v1 (OPENAI_BASE_URL).")
@click.option("--api-key", help="Bearer key (OPENAI_API_KEY).")
@click.option(
    "--max-tokens", type=click.IntRange(min=1),
    help="Completion tokens per call (FAULTFINDER_LLM_MAX_TOKENS).",
)  # fmt: skip
@click.option(
    "--timeout", type=click.FloatRange(min=0, min_open=True),
    help="Seconds per call attempt (FAULTFINDER_LLM_TIMEOUT).",
)  # fmt: skip
@click.option(
    "--token-budget", type=click.IntRange(min=1),
    help="Tokens one attribution may spend (FAULTFINDER_LLM_TOKEN_BUDGET).",
)  # fmt: skip
@click.option(
    "--context-tokens", type=click.IntRange(min=257),
    help="The model's context window (FAULTFINDER_LLM_CONTEXT_TOKENS; with --local-model"
    " also the server's n_ctx, default 8192).",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print only the summary JSON on stdout.")
@click.option(
    "--datasets-dir",
    envvar=DATASETS_DIR_ENV,
    type=click.Path(file_okay=False, path_type=Path),
    help=f"Root of the datasets (${DATASETS_DIR_ENV}; default ../shared/datasets).",
)
@click.option(
    "--cv", "cv_folds", type=click.IntRange(min=2),
    help="Trained attributors (learned): K-fold cross-validation, scoring held-out folds only.",
)  # fmt: skip
@click.option(
    "--cv-seeds", type=click.IntRange(min=1), default=3, show_default=True,
    help="With --cv: fold splits with seeds S..S+N-1 (S = --seed); reports mean and spread.",
)  # fmt: skip
@click.option(
    "--group-by", type=click.Choice(["task", "framework"]), default="task", show_default=True,
    help="With --cv: folds keep a task's runs together (task), or hold out one whole"
    " framework each (framework: leave-one-framework-out; K is the number of frameworks).",
)  # fmt: skip
@click.option(
    "--train-also", metavar="SPEC",
    help="With --cv: labelled records every fold also trains on, never scored (e.g."
    " who_and_when beside an injected corpus).",
)  # fmt: skip
@click.option(
    "--learned-model", type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="The learned attributor's model file (from `faultfinder train`) instead of the"
    " packaged one; with --prefilter, the model whose top steps are the hints.",
)  # fmt: skip
@click.option(
    "--prefilter", "prefilter_top_k", type=click.IntRange(min=1),
    help="LLM methods: name the learned model's top K steps to the model as hints and shorten"
    " the log away from them. On Who&When the hints come from out-of-fold models.",
)  # fmt: skip
@click.option(
    "--prefilter-cv", type=click.IntRange(min=2),
    help="With --prefilter on Who&When: folds of the out-of-fold models (default 5, split by"
    " --seed); each record's hints come from a model trained on the other folds. Other"
    " datasets use the packaged model, which was trained on Who&When only.",
)  # fmt: skip
def run_command(
    dataset: str,
    attributor: str,
    with_ground_truth: bool,
    limit: int | None,
    records_file: Path | None,
    fraction: str | None,
    subset_seed: int,
    concurrency: int | None,
    seed: int,
    repeats: int,
    out: Path | None,
    resume: bool,
    local_model: str | None,
    local_threads: int,
    model: str | None,
    base_url: str | None,
    api_key: str | None,
    max_tokens: int | None,
    timeout: float | None,
    token_budget: int | None,
    context_tokens: int | None,
    as_json: bool,
    datasets_dir: Path | None,
    cv_folds: int | None,
    cv_seeds: int,
    group_by: str,
    train_also: str | None,
    learned_model: Path | None,
    prefilter_top_k: int | None,
    prefilter_cv: int | None,
) -> None:
    """Score an attributor on a labelled dataset (accuracy, ±k, official-script, cost).

    Runs are resumable: rerun with the same --out to finish what an interrupted run left.
    """
    given_model = model_options(
        model,
        base_url,
        api_key,
        {
            "max_tokens": max_tokens,
            "timeout": timeout,
            "token_budget": token_budget,
            "context_tokens": context_tokens,
        },
    )
    check_model_options(attributor, given_model, local_model, bool(model or base_url or api_key))
    prefilter_cv = prefilter_folds(attributor, dataset, prefilter_top_k, prefilter_cv)
    root = resolve_datasets_dir(datasets_dir)
    records, selection = load_records(dataset, root, limit, records_file, fraction, subset_seed)
    _check_training_options(
        attributor, cv_folds, group_by, train_also, learned_model, prefilter_top_k
    )
    if cv_folds is not None:
        _cross_validate(
            records,
            attributor,
            root=root,
            folds=cv_folds,
            seeds=tuple(seed + r for r in range(cv_seeds)),
            use_ground_truth=with_ground_truth,
            group_by=group_by,
            train_also=train_also,
            out_dir=out if out is not None else _default_out_dir(dataset, f"{attributor}-cv"),
            as_json=as_json,
        )
        return
    if concurrency is None:
        concurrency = 1 if local_model is not None else 4
    stderr = Console(stderr=True)
    label = attributor if prefilter_top_k is None else f"{attributor}-prefilter{prefilter_top_k}"
    out_dir = out if out is not None else _default_out_dir(dataset, label)
    prefilter, config = prefilter_settings(
        prefilter_top_k,
        prefilter_cv,
        seed,
        resumed_dir=out_dir if resume else None,
        root=root,
        records=records,
        use_ground_truth=with_ground_truth,
        console=stderr,
    )
    if learned_model is not None and attributor == "learned":
        config["model_path"] = str(learned_model)
    elif learned_model is not None and prefilter is not None:
        if prefilter_cv is not None:
            raise click.UsageError("--learned-model and --prefilter-cv name two hint models")
        from faultfinder.attributors.learned import StepModel

        hints = StepModel.load(learned_model)
        training = {**hints.training, "prefilter_source": f"model file {learned_model}"}
        config["prefilter_model"] = dataclasses.replace(hints, training=training)
        prefilter["model_file"] = str(learned_model)

    # One request at a time per record keeps a single local server from thrashing.
    given_model.setdefault("concurrency", concurrency)
    with (
        terminate_cleanly(),
        model_client_settings(
            attributor in LLM_METHODS,
            local_model,
            given_model,
            out_dir,
            context_tokens,
            local_threads,
            stderr,
        ) as model_settings,
    ):
        if model_settings is not None:
            config["settings"] = model_settings
        method = _attributor(attributor, config)
        model_identity, model_record = recorded_model(model_settings, local_model)
        settings = BenchmarkSettings(
            dataset=dataset,
            attributor=attributor,
            use_ground_truth=with_ground_truth,
            limit=limit,
            concurrency=concurrency,
            seed=seed,
            repeats=repeats,
            datasets_dir=str(root),
            model=model_identity,
            model_settings=model_record,
            selection=selection,
            prefilter=prefilter,
        )
        summary = _run_with_progress(records, method, settings, out_dir, resume, stderr)

    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    _print_summary(summary, out_dir)


def _check_training_options(
    attributor: str,
    cv_folds: int | None,
    group_by: str,
    train_also: str | None,
    learned_model: Path | None,
    prefilter_top_k: int | None,
) -> None:
    """The cross-validation options only with --cv; a model file only for the learned
    attributor scored as it is, or for the pre-filter's hints."""
    if (group_by != "task" or train_also) and cv_folds is None:
        raise click.UsageError("--group-by and --train-also apply to --cv")
    if learned_model is not None and (
        (attributor != "learned" and prefilter_top_k is None) or cv_folds is not None
    ):
        raise click.UsageError(
            "--learned-model applies to the learned attributor without --cv, or to the hints"
            " of --prefilter"
        )


def _cross_validate(
    records: list[BenchmarkRecord],
    attributor: str,
    *,
    root: Path,
    folds: int,
    seeds: tuple[int, ...],
    use_ground_truth: bool,
    group_by: str,
    train_also: str | None,
    out_dir: Path,
    as_json: bool,
) -> None:
    """`--cv`: score the trained attributor on held-out folds only; the --train-also
    records that are not scored join every fold's training."""
    from faultfinder.evaluation.run.cv.crossval import cross_validate_command
    from faultfinder.evaluation.run.cv.folds import CVSettings

    extra: list[BenchmarkRecord] = []
    if train_also:
        try:
            extra = list(load_dataset(train_also, root))
        except DatasetError as exc:
            raise click.ClickException(str(exc)) from None
        scored = {record.record_id for record in records}
        extra = [record for record in extra if record.record_id not in scored]
    cross_validate_command(
        records,
        attributor=attributor,
        settings=CVSettings(
            folds=folds,
            seeds=seeds,
            use_ground_truth=use_ground_truth,
            group_by=group_by,
            also_trained_on=train_also,
        ),
        out_dir=out_dir,
        as_json=as_json,
        also_train_on=extra,
    )


def _attributor(name: str, config: Mapping[str, Any]) -> Attributor:
    try:
        return get_attributor(name, **config)
    except UnknownAttributorError as exc:
        raise click.BadParameter(str(exc), param_hint="'--attributor'") from None


def _run_with_progress(
    records: list[BenchmarkRecord],
    method: Attributor,
    settings: BenchmarkSettings,
    out_dir: Path,
    resume: bool,
    console: Console,
) -> dict[str, Any]:
    """`run_benchmark` under a progress bar, closing the attributor after it."""
    progress = attribution_progress(console)
    with progress:
        task = progress.add_task(f"{settings.attributor} on {settings.dataset}", total=None)

        def plan(finished: int, to_do: int) -> None:
            if finished:
                console.print(
                    f"resuming {out_dir}: {finished} of {finished + to_do} selected"
                    f" attributions already done, {to_do} to go"
                )
            progress.update(task, total=to_do)

        async def run_then_close() -> dict[str, Any]:
            try:
                return await run_benchmark(
                    records,
                    method,
                    settings,
                    out_dir=out_dir,
                    resume=resume,
                    on_outcome=lambda _: progress.advance(task),
                    on_plan=plan,
                )
            finally:
                await close_attributor(method)

        try:
            return anyio.run(run_then_close)
        except ResumeMismatch as exc:
            raise click.ClickException(str(exc)) from None
