"""One nightly entry: its records, its attributor, the benchmark run (resumable, within its
time budget) and what the history keeps of it.

The scoring is `bench run`'s (`run_benchmark`, `summarise_results`); this module adds the
records' selection from the suite, the time budget, and the history's view of the result:
figures with Wilson intervals and every record's correctness.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from faultfinder.attributors.base import Attributor, get_attributor
from faultfinder.attributors.llm import ModelSettings
from faultfinder.attributors.model import Attribution
from faultfinder.attributors.scoring import OVERALL, score_attribution, wilson_interval
from faultfinder.datasets import BenchmarkRecord, DatasetError, load_dataset
from faultfinder.datasets.labelled import labelled_records
from faultfinder.evaluation.nightly.suite import DatasetDef, Entry, resolve_spec
from faultfinder.evaluation.run import (
    RESULTS_FILE,
    BenchmarkSettings,
    RecordOutcome,
    read_results,
    run_benchmark,
)
from faultfinder.evaluation.run.checkpoint import read_run_file, result_key
from faultfinder.evaluation.run.selection import choose_records

__all__ = [
    "EntryOutcome",
    "LoadedDataset",
    "build_attributor",
    "entry_figures",
    "load_dataset_records",
    "record_results",
    "run_entry",
]

FIGURE_METRICS = ("agent", "step", "agent_and_step", "step_pm1", "step_pm3", "step_pm5")


@dataclass(frozen=True)
class LoadedDataset:
    """A suite dataset's records, or why its entries are skipped."""

    records: list[BenchmarkRecord]
    spec: str
    """What `BenchmarkSettings.dataset` records: the resolved spec, or `database`."""
    selection: str
    skipped: str | None = None


async def load_dataset_records(
    dataset: DatasetDef, *, suite_dir: Path, datasets_dir: Path, database_url: str
) -> LoadedDataset:
    """The dataset's records as the suite selects them. Raises DatasetError (or
    LabelledRunsError) when they cannot be read, unless the dataset is optional."""
    if dataset.database is not None and dataset.database is not False:
        url = database_url if dataset.database is True else str(dataset.database)
        labelled = await labelled_records(url)
        everything, spec = labelled.records, "database"
        if not everything:
            return LoadedDataset([], spec, "none", "no labelled runs in the database yet")
    else:
        assert dataset.spec is not None
        spec = resolve_spec(dataset.spec, suite_dir)
        try:
            everything = await anyio.to_thread.run_sync(
                lambda: list(load_dataset(spec, datasets_dir))
            )
        except DatasetError as exc:
            if dataset.optional:
                return LoadedDataset([], spec, "none", f"optional dataset not found: {exc}")
            raise
    records_file = suite_dir / dataset.records if dataset.records is not None else None
    chosen, selection = choose_records(
        everything, dataset.limit, records_file, dataset.fraction, dataset.subset_seed
    )
    skipped = None if chosen else "the selection holds no records"
    return LoadedDataset(chosen, spec, selection, skipped)


def build_attributor(
    entry: Entry, environ: Mapping[str, str]
) -> tuple[Attributor, str | None, dict[str, Any]]:
    """The entry's attributor, and for an LLM method its model's identity and the client
    settings recorded (never the key)."""
    config = dict(entry.attributor.config)
    model: str | None = None
    recorded: dict[str, Any] = {}
    if entry.attributor.uses_model:
        settings = ModelSettings.from_environment(environ, **entry.attributor.model_overrides())
        config["settings"] = settings
        model = settings.model
        recorded = settings.model_dump(mode="json", exclude={"api_key"})
    return get_attributor(entry.attributor.method, **config), model, recorded


@dataclass(frozen=True)
class EntryOutcome:
    summary: dict[str, Any]
    lines: list[dict[str, Any]]
    budget_ran_out: bool


async def run_entry(
    records: Sequence[BenchmarkRecord],
    method: Attributor,
    settings: BenchmarkSettings,
    *,
    out_dir: Path,
    time_budget_s: float | None,
    on_plan: Callable[[int, int], None] | None = None,
    on_outcome: Callable[[RecordOutcome], None] | None = None,
) -> EntryOutcome:
    """`run_benchmark` in `out_dir` (resuming what an interrupted night left there), within
    the entry's time budget: records it did not reach are scored as failed attributions,
    as ATTRIBUTORS.md counts them."""
    budget_ran_out = False
    summary: dict[str, Any] | None = None
    if time_budget_s is not None:
        recorded = read_run_file(out_dir) if out_dir.is_dir() else None
        spent = sum(
            float(session.get("wall_time_s", 0.0))
            for session in (recorded or {}).get("sessions", [])
        )
        with anyio.move_on_after(max(0.0, time_budget_s - spent)) as scope:
            summary = await run_benchmark(
                records, method, settings, out_dir=out_dir, on_outcome=on_outcome, on_plan=on_plan
            )
        if scope.cancelled_caught:
            budget_ran_out, summary = True, None
            _fail_the_rest(records, settings, out_dir, time_budget_s)
    if summary is None:  # no budget, or the budget ran out: summarise every line written
        summary = await run_benchmark(
            records,
            method,
            settings,
            out_dir=out_dir,
            on_outcome=on_outcome,
            on_plan=None if budget_ran_out else on_plan,
        )
    lines = read_results(out_dir / RESULTS_FILE)
    return EntryOutcome(summary, lines, budget_ran_out)


def _fail_the_rest(
    records: Sequence[BenchmarkRecord], settings: BenchmarkSettings, out_dir: Path, budget: float
) -> None:
    results = out_dir / RESULTS_FILE
    done = {result_key(line) for line in read_results(results, repair=True)}
    reason = f"not attributed: the entry's time budget of {budget:g} s ran out"
    with results.open("a", encoding="utf-8") as handle:
        for repeat, seed in enumerate(settings.seeds):
            for record in records:
                if (record.record_id, seed) in done:
                    continue
                attribution = Attribution.failed(settings.attributor, reason)
                outcome = RecordOutcome(
                    record=record,
                    attribution=attribution,
                    score=score_attribution(attribution, record.gold.agent, record.gold.step),
                    latency_s=0.0,
                    repeat=repeat,
                    seed=seed,
                )
                handle.write(json.dumps(outcome.as_json(), ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def fingerprint(line: Mapping[str, Any]) -> str:
    """Which record was scored: its id, gold agent and step, and step count."""
    gold = line.get("gold") or {}
    text = json.dumps(
        [str(line["record_id"]), gold.get("agent"), gold.get("step"), line.get("n_steps")]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def record_results(lines: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each record's correctness (first repeat), answer and gold, as the history keeps it."""
    seen: set[str] = set()
    kept: list[dict[str, Any]] = []
    for line in sorted(lines, key=lambda item: item.get("repeat") or 0):
        record_id = str(line["record_id"])
        if record_id in seen:
            continue
        seen.add(record_id)
        score = line.get("score") or {}
        attribution = line.get("attribution") or {}
        gold = line.get("gold") or {}
        kept.append(
            {
                "id": record_id,
                "fingerprint": fingerprint(line),
                "subset": str(line.get("subset")),
                **{metric: bool(score.get(metric)) for metric in FIGURE_METRICS},
                "failed": bool(score.get("failed")),
                "answer": {"agent": attribution.get("agent"), "step": attribution.get("step")},
                "gold": {"agent": gold.get("agent"), "step": gold.get("step")},
                "tokens": int(line.get("prompt_tokens", 0)) + int(line.get("completion_tokens", 0)),
                "latency_s": float(line.get("latency_s", 0.0)),
            }
        )
    kept.sort(key=lambda record: record["id"])
    return kept


def entry_figures(summary: Mapping[str, Any]) -> dict[str, Any]:
    """Per subset and `overall`, each metric's accuracy with hits, n and 95 % Wilson interval."""
    figures: dict[str, Any] = {}
    for subset, scored in summary["subsets"].items():
        n = int(scored["n"])
        per_metric = {}
        for metric in FIGURE_METRICS:
            value = float(scored["accuracy"][metric]["mean"])
            hits = round(value * n)
            lo, hi = wilson_interval(hits, n)
            per_metric[metric] = {"value": value, "hits": hits, "n": n, "lo": lo, "hi": hi}
        figures[subset] = per_metric
    if OVERALL in figures:  # overall last, after the subsets in name order
        figures[OVERALL] = figures.pop(OVERALL)
    return figures
