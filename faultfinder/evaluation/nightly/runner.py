"""A nightly run of a suite: plan the entries, pick up the run an interruption left, score
each entry still missing, gate it against its baseline and store it in the history.

Resuming works at two levels: a suite run stores each entry once (`bench_history` is
unique by run and entry), so a rerun skips the entries already stored; and each entry
runs `bench run`'s resumable benchmark in its own folder under `out/<run id>/`, so the
records an interrupted entry had finished are not attributed again.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import click
from rich.console import Console

from faultfinder.attributors.base import (
    UnknownAttributorError,
    available_attributors,
    close_attributor,
)
from faultfinder.datasets import DatasetError
from faultfinder.datasets.labelled import LabelledRunsError
from faultfinder.evaluation.nightly.entry import (
    LoadedDataset,
    build_attributor,
    entry_figures,
    load_dataset_records,
    record_results,
    run_entry,
)
from faultfinder.evaluation.nightly.gate import compare
from faultfinder.evaluation.nightly.suite import DatasetDef, Entry, Suite, endpoint_configured
from faultfinder.evaluation.run import BenchmarkSettings, ResumeMismatch, attribution_progress
from faultfinder.server.progress import Progress
from faultfinder.server.store import BenchEntry, BenchHistory, BenchRun, BenchVerdict

__all__ = ["NightlyResult", "new_run_id", "run_nightly"]

RESUME_WITHIN_S = 24 * 3600
"""An unfinished run of the same suite and code started this recently is continued."""
NO_ENDPOINT = (
    "no model endpoint: set base_url in the suite, or OPENAI_BASE_URL (FAULTFINDER_LLM_BASE_URL)"
)


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


@dataclass
class NightlyResult:
    run: BenchRun
    entries: list[BenchEntry]
    """Every entry the run has stored (this session's and earlier ones'), in order."""
    baselines: dict[int, BenchEntry] = field(default_factory=dict)
    """The entries compared with, by id (with their records)."""
    scored_now: int = 0
    """Entries this session scored (the others an interrupted session had stored)."""
    wall_time_s: float = 0.0

    @property
    def regressions(self) -> list[BenchEntry]:
        return [entry for entry in self.entries if entry.regression]


@dataclass(frozen=True)
class NightlyOptions:
    suite_dir: Path
    database_url: str
    datasets_dir: Path
    out: Path
    code_version: str
    environ: Mapping[str, str]
    run_id: str | None = None
    new: bool = False


async def run_nightly(
    suite: Suite,
    history: BenchHistory,
    options: NightlyOptions,
    *,
    console: Console,
    on_run: Callable[[BenchRun], None] | None = None,
) -> NightlyResult:
    """Score the suite's missing entries of this night's run and store them with the gate's
    verdicts. Raises click.ClickException for what the user must fix."""
    began = time.perf_counter()
    _check_attributors(suite)
    with console.status("loading the suite's datasets"):
        loaded = {dataset.name: await _load(dataset, options) for dataset in suite.datasets}
    plan = _plan(suite.entries(), loaded, options.environ)
    run, resumed = await _choose_run(suite, history, options, plan)
    if on_run is not None:
        on_run(run)
    stored = {entry.entry for entry in await history.run_entries(run.id, with_records=False)}
    by_key = {entry.key: entry for entry in suite.entries()}
    to_do = [by_key[key] for key in run.planned if key not in stored and key in by_key]
    skipped = [item for item in run.plan if item.get("skipped")]
    if resumed:
        console.print(
            f"resuming nightly run {run.id}: {len(stored)} of {len(run.planned)} entries"
            f" stored, {len(to_do)} to go"
        )
    else:
        console.print(
            f"nightly run {run.id}: {len(run.planned)} entries"
            + (f", {len(skipped)} skipped" if skipped else "")
        )
    progress = attribution_progress(console)
    with progress:
        overall = progress.add_task(f"nightly {run.id}", total=len(to_do))
        scored_now = 0
        for entry in to_do:
            # What a resumed run planned may no longer be possible (an endpoint unset since).
            reason = _skip_reason(entry, loaded[entry.dataset.name], options.environ)
            if reason is not None:
                console.print(f"skipped {entry.key} this time: {reason}")
            else:
                dataset = loaded[entry.dataset.name]
                await _score(entry, run, dataset, suite, history, options, progress)
                scored_now += 1
            progress.advance(overall)
    await history.finish_run(run.id)
    finished = await history.get_run(run.id)
    scored = await history.run_entries(run.id)
    baselines = {}
    for each in scored:
        if each.baseline_id is not None and each.baseline_id not in baselines:
            baselines[each.baseline_id] = await history.get(each.baseline_id)
    return NightlyResult(
        run=finished or run,
        entries=scored,
        baselines=baselines,
        scored_now=scored_now,
        wall_time_s=time.perf_counter() - began,
    )


def _check_attributors(suite: Suite) -> None:
    known = set(available_attributors())
    unknown = sorted({a.method for a in suite.attributors} - known)
    if unknown:
        raise click.ClickException(
            f"the suite names attributors nobody registered: {', '.join(unknown)}; available:"
            f" {', '.join(sorted(known))} (plugins: --plugins / FAULTFINDER_PLUGINS)"
        )


async def _load(dataset: DatasetDef, options: NightlyOptions) -> LoadedDataset:
    try:
        return await load_dataset_records(
            dataset,
            suite_dir=options.suite_dir,
            datasets_dir=options.datasets_dir,
            database_url=options.database_url,
        )
    except (DatasetError, LabelledRunsError) as exc:
        raise click.ClickException(f"dataset {dataset.name!r}: {exc}") from None


def _plan(
    entries: Sequence[Entry], loaded: Mapping[str, LoadedDataset], environ: Mapping[str, str]
) -> list[dict[str, object]]:
    plan: list[dict[str, object]] = []
    for entry in entries:
        dataset = loaded[entry.dataset.name]
        reason = _skip_reason(entry, dataset, environ)
        plan.append({"entry": entry.key, "skipped": reason, "records": len(dataset.records)})
    return plan


def _skip_reason(entry: Entry, dataset: LoadedDataset, environ: Mapping[str, str]) -> str | None:
    if dataset.skipped is not None or not dataset.records:
        return dataset.skipped or "no records"
    if entry.attributor.uses_model and not endpoint_configured(entry.attributor, environ):
        return NO_ENDPOINT
    return None


async def _choose_run(
    suite: Suite, history: BenchHistory, options: NightlyOptions, plan: list[dict[str, object]]
) -> tuple[BenchRun, bool]:
    """The run to continue (named, or the newest unfinished one of this suite and code),
    else a new one."""
    existing: BenchRun | None = None
    if options.run_id is not None:
        existing = await history.get_run(options.run_id)
        if existing is not None and existing.digest != suite.digest:
            raise click.ClickException(
                f"nightly run {options.run_id} was made with another version of suite"
                f" {existing.suite!r}; give a new --run-id"
            )
    elif not options.new:
        existing = await history.unfinished_run(
            suite.name,
            digest=suite.digest,
            code_version=options.code_version,
            since_ns=time.time_ns() - RESUME_WITHIN_S * 10**9,
        )
    if existing is not None:
        return existing, True
    run = BenchRun(
        id=options.run_id or new_run_id(),
        suite=suite.name,
        digest=suite.digest,
        code_version=options.code_version,
        plan=plan,
        started_at=time.time_ns(),
    )
    return await history.start_run(run), False


def entry_folder(out: Path, run_id: str, key: str) -> Path:
    """Where an entry's resumable results live: one flat folder per entry."""
    slug = re.sub(r"[^A-Za-z0-9_.:+-]+", "_", key.replace("/", "__"))
    run_slug = re.sub(r"[^A-Za-z0-9_.:+-]+", "_", run_id)
    return out / run_slug / slug


async def _score(
    entry: Entry,
    run: BenchRun,
    dataset: LoadedDataset,
    suite: Suite,
    history: BenchHistory,
    options: NightlyOptions,
    progress: Progress,
) -> BenchEntry:
    try:
        method, model, model_record = build_attributor(entry, options.environ)
    except UnknownAttributorError as exc:
        raise click.ClickException(f"{entry.key}: {exc}") from None
    settings = BenchmarkSettings(
        dataset=dataset.spec,
        attributor=entry.attributor.method,
        use_ground_truth=entry.settings.use_ground_truth,
        concurrency=entry.settings.concurrency,
        seed=entry.settings.seed,
        attributor_config=dict(entry.settings.options),
        datasets_dir=str(options.datasets_dir),
        model=model,
        model_settings=model_record,
        selection=dataset.selection,
    )
    task = progress.add_task(entry.key, total=None)
    started = time.time_ns()
    try:
        outcome = await run_entry(
            dataset.records,
            method,
            settings,
            out_dir=entry_folder(options.out, run.id, entry.key),
            time_budget_s=entry.attributor.time_budget_s,
            on_plan=lambda done, to_do: progress.update(task, total=done + to_do, completed=done),
            on_outcome=lambda _: progress.advance(task),
        )
    except ResumeMismatch as exc:
        raise click.ClickException(f"{entry.key}: {exc}") from None
    finally:
        await close_attributor(method)
    records = record_results(outcome.lines)
    figures = entry_figures(outcome.summary)
    overall = figures["overall"]
    cost = outcome.summary["subsets"]["overall"]["cost"]
    baseline = await history.baseline(entry.key, excluding_run=run.id)
    gate = compare(records, baseline, alpha=suite.gate.alpha, metrics=suite.gate.metrics)
    definition = entry.definition()
    definition["dataset"]["resolved"] = dataset.spec
    definition["selection"] = dataset.selection
    if model_record:
        definition["model_settings"] = model_record
    if outcome.budget_ran_out:
        definition["time_budget_ran_out"] = True
    scored = BenchEntry(
        run_id=run.id,
        entry=entry.key,
        dataset=entry.dataset.name,
        attributor=entry.attributor.name,
        settings=entry.settings.name,
        method=entry.attributor.method,
        code_version=options.code_version,
        model=model,
        started_at=started,
        created_at=time.time_ns(),
        wall_time_s=float(outcome.summary["wall_time_s"]),
        n_records=len(records),
        agent_accuracy=float(overall["agent"]["value"]),
        step_accuracy=float(overall["step"]["value"]),
        llm_calls=int(cost["total_llm_calls"]),
        prompt_tokens=int(cost["total_prompt_tokens"]),
        completion_tokens=int(cost["total_completion_tokens"]),
        figures=figures,
        verdict=gate.verdict.value,
        accepted=gate.verdict is not BenchVerdict.REGRESSION,
        records=records,
        definition=definition,
        baseline_id=baseline.id if baseline is not None else None,
        gate=gate.as_json(),
    )
    stored = await history.add_entry(scored)
    return stored or scored
