"""`faultfinder bench run`: run an attributor over a labelled dataset, score it and write a report.

`run_benchmark` is the reusable core (records in, summary out, results.jsonl appended
as records finish, resumable); the click command resolves options (dataset, record
subset, model endpoint or local model server), shows progress and prints.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import anyio
import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from faultfinder.attributors.base import (
    AttributeOptions,
    Attributor,
    UnknownAttributorError,
    available_attributors,
    get_attributor,
)
from faultfinder.attributors.llm import ModelSettings
from faultfinder.attributors.llm_methods import LLM_METHODS
from faultfinder.attributors.local_model import LOCAL_MODELS, LocalModelError, LocalModelServer
from faultfinder.attributors.model import Attribution, validate_against
from faultfinder.attributors.scoring import (
    OVERALL,
    RandomExpectation,
    RecordScore,
    ScoredRecord,
    aggregate,
    random_expectation,
    score_attribution,
    spread,
)
from faultfinder.benchmarks.datasets import (
    DATASET_SPECS,
    DATASETS_DIR_ENV,
    BenchmarkRecord,
    DatasetError,
    load_dataset,
    resolve_datasets_dir,
)
from faultfinder.benchmarks.plots import write_html_report
from faultfinder.benchmarks.report import render_report
from faultfinder.benchmarks.subsets import (
    FIXED_SUBSET_SEED,
    SubsetError,
    parse_fraction,
    read_record_ids,
    select_records,
)
from faultfinder.server.progress import Progress

__all__ = [
    "IDENTITY_FIELDS",
    "RESULTS_FILE",
    "RUN_FILE",
    "BenchmarkSettings",
    "RecordOutcome",
    "ResumeMismatch",
    "attribute_records",
    "random_baseline",
    "read_results",
    "run_benchmark",
    "run_command",
    "summarise_results",
]

RESULTS_FILE = "results.jsonl"
"""One line per attributed record (and repeat), appended as records finish."""
RUN_FILE = "run.json"
"""The run's identity and its sessions (each start or resume), rewritten as records finish."""
IDENTITY_FIELDS = ("dataset", "attributor", "use_ground_truth", "model", "prefilter")
"""Settings that must match for a run directory to be resumed."""


@dataclass(frozen=True)
class BenchmarkSettings:
    """What a benchmark run does; recorded verbatim in summary.json."""

    dataset: str
    attributor: str
    use_ground_truth: bool = True
    limit: int | None = None
    """At most this many records per subset (None: all)."""
    concurrency: int = 4
    seed: int = 0
    repeats: int = 1
    """Repeat r uses seed `seed + r`."""
    attributor_config: Mapping[str, Any] = field(default_factory=dict)
    datasets_dir: str | None = None
    model: str | None = None
    """The model's identity for LLM methods (local model key or endpoint model name)."""
    model_settings: Mapping[str, Any] = field(default_factory=dict)
    """The client settings used (without the API key); recorded, not part of the identity."""
    selection: str = "all records"
    """How the records were chosen (limit, fixed fraction, record list)."""
    prefilter: Mapping[str, Any] | None = None
    """The learned pre-filter of LLM methods (top_k, cv_folds, cv_seed, cv_folds_by), None
    when off."""

    @property
    def seeds(self) -> list[int]:
        return [self.seed + r for r in range(self.repeats)]

    def identity(self) -> dict[str, Any]:
        """The settings a resumed run must share with the run it continues."""
        return {
            "dataset": self.dataset.strip().lower(),
            "attributor": self.attributor,
            "use_ground_truth": self.use_ground_truth,
            "model": self.model,
            "prefilter": dict(self.prefilter) if self.prefilter is not None else None,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "attributor": self.attributor,
            "use_ground_truth": self.use_ground_truth,
            "limit": self.limit,
            "concurrency": self.concurrency,
            "seed": self.seed,
            "repeats": self.repeats,
            "seeds": self.seeds,
            "attributor_config": dict(self.attributor_config),
            "datasets_dir": self.datasets_dir,
            "model": self.model,
            "model_settings": dict(self.model_settings),
            "selection": self.selection,
            "prefilter": dict(self.prefilter) if self.prefilter is not None else None,
        }


@dataclass(frozen=True)
class RecordOutcome:
    """One attribution of one record, with its score and measured latency."""

    record: BenchmarkRecord
    attribution: Attribution
    score: RecordScore
    latency_s: float
    repeat: int = 0
    seed: int | None = None
    invalid: str | None = None
    """Why the attribution does not fit the trajectory (unknown agent, step out of range)."""

    def scored(self) -> ScoredRecord:
        return ScoredRecord(
            subset=self.record.subset,
            score=self.score,
            llm_calls=self.attribution.llm_calls,
            prompt_tokens=self.attribution.prompt_tokens,
            completion_tokens=self.attribution.completion_tokens,
            latency_s=self.latency_s,
        )

    def as_json(self) -> dict[str, Any]:
        gold = self.record.gold
        return {
            "record_id": self.record.record_id,
            "dataset": self.record.dataset,
            "subset": self.record.subset,
            "repeat": self.repeat,
            "seed": self.seed,
            "n_steps": len(self.record.trajectory),
            "gold": {
                "agent": gold.agent,
                "step": gold.step,
                "reason": gold.reason,
                "mode": gold.mode,
            },
            "attribution": self.attribution.model_dump(mode="json"),
            "score": self.score.as_dict(),
            "invalid": self.invalid,
            "llm_calls": self.attribution.llm_calls,
            "prompt_tokens": self.attribution.prompt_tokens,
            "completion_tokens": self.attribution.completion_tokens,
            "latency_s": self.latency_s,
            "random_expected": _random_expected(self.record),
        }


def _random_expected(record: BenchmarkRecord) -> dict[str, float]:
    expectation: RandomExpectation = random_expectation(
        record.trajectory.roster, len(record.trajectory), record.gold.agent, record.gold.step
    )
    return {"agent": expectation.agent, "step": expectation.step}


async def _attribute_one(
    attributor: Attributor, record: BenchmarkRecord, options: AttributeOptions
) -> tuple[Attribution, float]:
    trajectory = record.trajectory
    if not options.use_ground_truth and trajectory.ground_truth is not None:
        # Withhold the answer from the method itself, not just by asking it not to look.
        trajectory = trajectory.model_copy(update={"ground_truth": None})
    started = time.perf_counter()
    try:
        attribution = await attributor.attribute(trajectory, options)
    except Exception as exc:  # one bad record must not end the run
        attribution = Attribution.failed(
            getattr(attributor, "name", "unknown"),
            f"attributor raised {type(exc).__name__}: {exc}",
            details={"exception": type(exc).__name__},
        )
    return attribution, time.perf_counter() - started


async def attribute_records(
    records: Sequence[BenchmarkRecord],
    attributor: Attributor,
    options: AttributeOptions,
    *,
    concurrency: int = 4,
    repeat: int = 0,
    on_outcome: Callable[[RecordOutcome], None] | None = None,
) -> list[RecordOutcome]:
    """Attribute and score every record, at most `concurrency` at a time, in input order."""
    limiter = anyio.CapacityLimiter(max(1, concurrency))
    outcomes: list[RecordOutcome | None] = [None] * len(records)

    async def visit(position: int, record: BenchmarkRecord) -> None:
        async with limiter:
            attribution, latency = await _attribute_one(attributor, record, options)
        outcome = RecordOutcome(
            record=record,
            attribution=attribution,
            score=score_attribution(attribution, record.gold.agent, record.gold.step),
            latency_s=latency,
            repeat=repeat,
            seed=options.seed,
            invalid=validate_against(attribution, record.trajectory),
        )
        outcomes[position] = outcome
        if on_outcome is not None:
            on_outcome(outcome)

    async with anyio.create_task_group() as group:
        for position, record in enumerate(records):
            group.start_soon(visit, position, record)
    return [outcome for outcome in outcomes if outcome is not None]


class ResumeMismatch(ValueError):
    """A run directory holds results made with different settings than the ones asked for."""


def random_baseline(records: Sequence[BenchmarkRecord]) -> dict[str, dict[str, float]]:
    """Expected accuracy of the uniform random baseline per subset and overall (fractions)."""
    return _mean_expectations([(r.subset, _random_expected(r)) for r in records])


def _mean_expectations(
    items: Sequence[tuple[str, Mapping[str, float]]],
) -> dict[str, dict[str, float]]:
    groups: dict[str, list[Mapping[str, float]]] = {}
    for subset, expectation in items:
        groups.setdefault(subset, []).append(expectation)
    groups = {name: groups[name] for name in sorted(groups)}
    groups[OVERALL] = [expectation for _, expectation in items]
    result: dict[str, dict[str, float]] = {}
    for name, members in groups.items():
        n = max(1, len(members))
        result[name] = {
            "agent": sum(e["agent"] for e in members) / n,
            "step": sum(e["step"] for e in members) / n,
        }
    return result


# --- results files --------------------------------------------------------------------


def _result_key(line: Mapping[str, Any]) -> tuple[str, int | None]:
    return str(line["record_id"]), line.get("seed")


def read_results(path: Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """The lines of a results.jsonl file.

    A process killed mid-write leaves a torn last line; it is ignored (and with
    `repair` cut off, so that appended lines start on a line of their own). A bad
    line anywhere else is an error naming the file and line.
    """
    if not path.is_file():
        return []
    raw = path.read_bytes()
    complete = raw if raw.endswith(b"\n") or not raw else raw[: raw.rfind(b"\n") + 1]
    if repair and len(complete) != len(raw):
        with path.open("r+b") as handle:
            handle.truncate(len(complete))
    lines: list[dict[str, Any]] = []
    for number, text in enumerate(complete.decode("utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
            _result_key(line)
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: line {number} is not a benchmark result ({exc})") from None
        lines.append(line)
    return lines


def _read_run_file(out_dir: Path) -> dict[str, Any] | None:
    path = out_dir / RUN_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResumeMismatch(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("identity"), dict):
        raise ResumeMismatch(f"{path} has no 'identity' object")
    return data


def _write_run_file(out_dir: Path, data: Mapping[str, Any]) -> None:
    # Replace atomically: a kill while writing must not leave a half file behind.
    path = out_dir / RUN_FILE
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(scratch, path)


def _check_identity(out_dir: Path, recorded: Mapping[str, Any], wanted: Mapping[str, Any]) -> None:
    for name in IDENTITY_FIELDS:
        if recorded.get(name) != wanted.get(name):
            raise ResumeMismatch(
                f"{out_dir} holds results with {name} = {recorded.get(name)!r}, not"
                f" {wanted.get(name)!r}; use another --out directory (or --no-resume to"
                " start that directory over)"
            )


# --- summary --------------------------------------------------------------------------


def _scored_line(line: Mapping[str, Any]) -> ScoredRecord:
    flags = line["score"]
    score = RecordScore(
        agent=bool(flags["agent"]),
        step=bool(flags["step"]),
        step_within={
            int(key.removeprefix("step_pm")): bool(hit)
            for key, hit in flags.items()
            if key.startswith("step_pm")
        },
        official_agent=bool(flags["official_agent"]),
        official_step=bool(flags["official_step"]),
        failed=bool(flags["failed"]),
    )
    return ScoredRecord(
        subset=str(line["subset"]),
        score=score,
        llm_calls=int(line.get("llm_calls", 0)),
        prompt_tokens=int(line.get("prompt_tokens", 0)),
        completion_tokens=int(line.get("completion_tokens", 0)),
        latency_s=float(line.get("latency_s", 0.0)),
    )


def _structured_output(lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Which structured-output rungs answered, over all records (from attribution.details)."""
    calls: Counter[str] = Counter()
    final: Counter[str] = Counter()
    fallbacks = invalid = retried = 0
    for line in lines:
        details = (line.get("attribution") or {}).get("details") or {}
        for rung, count in (details.get("structured_output") or {}).items():
            calls[str(rung)] += int(count)
        if details.get("rung"):
            final[str(details["rung"])] += 1
        fallbacks += bool(details.get("rung_fallbacks"))
        invalid += bool(details.get("invalid_replies"))
        retried += bool(details.get("retried_errors"))
    return {
        "replies_by_rung": dict(calls.most_common()),
        "records_by_final_rung": dict(final.most_common()),
        "records_with_rung_fallback": fallbacks,
        "records_with_invalid_reply": invalid,
        "records_with_retried_error": retried,
    }


def _failure_reasons(lines: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    reasons: Counter[str] = Counter()
    for line in lines:
        attribution = line.get("attribution") or {}
        if attribution.get("status") == "failed":
            reason = str(attribution.get("failure_reason") or "unknown")
            reasons[reason.split(":", 1)[0][:80]] += 1
    return dict(reasons.most_common())


def summarise_results(
    lines: Sequence[Mapping[str, Any]],
    settings: BenchmarkSettings,
    *,
    wall_time_s: float,
    started_at: datetime,
    out_dir: Path | None = None,
    records: Sequence[BenchmarkRecord] = (),
    records_selected: int | None = None,
) -> dict[str, Any]:
    """The summary (accuracy per subset with spread over repeats, cost, rungs) of result lines.

    `records` supplies the random expectation for lines written without one.
    """
    by_id = {record.record_id: record for record in records}
    by_seed: dict[Any, list[Mapping[str, Any]]] = {}
    for line in lines:
        by_seed.setdefault(line.get("seed"), []).append(line)
    seeds = sorted(by_seed, key=lambda seed: (seed is None, seed or 0))
    per_repeat = [aggregate([_scored_line(line) for line in by_seed[seed]]) for seed in seeds]

    # Each record once for the random expectation, from whichever repeat saw it first.
    first_seen: dict[str, Mapping[str, Any]] = {}
    for line in lines:
        first_seen.setdefault(str(line["record_id"]), line)
    expectations: list[tuple[str, Mapping[str, float]]] = []
    for record_id, line in first_seen.items():
        if line.get("random_expected"):
            expectations.append((str(line["subset"]), line["random_expected"]))
        elif record_id in by_id:
            expectations.append((str(line["subset"]), _random_expected(by_id[record_id])))
    expected = _mean_expectations(expectations)

    subsets: dict[str, Any] = {}
    for name in per_repeat[0] if per_repeat else {}:
        runs = [scores[name] for scores in per_repeat if name in scores]
        members = [line for line in lines if name == OVERALL or line["subset"] == name]
        accuracy = {}
        for metric in runs[0].accuracy:
            values = [run.accuracy[metric] for run in runs]
            accuracy[metric] = {**spread(values), "values": values}
        failed = [float(run.failed) for run in runs]
        subsets[name] = {
            "n": runs[0].n,
            "failed": {**spread(failed), "values": failed},
            "accuracy": accuracy,
            "cost": {
                "mean_llm_calls": sum(r.mean_llm_calls for r in runs) / len(runs),
                "mean_prompt_tokens": sum(r.mean_prompt_tokens for r in runs) / len(runs),
                "mean_completion_tokens": sum(r.mean_completion_tokens for r in runs) / len(runs),
                "mean_latency_s": sum(r.mean_latency_s for r in runs) / len(runs),
                "total_llm_calls": sum(int(m.get("llm_calls", 0)) for m in members),
                "total_prompt_tokens": sum(int(m.get("prompt_tokens", 0)) for m in members),
                "total_completion_tokens": sum(int(m.get("completion_tokens", 0)) for m in members),
                "total_latency_s": sum(float(m.get("latency_s", 0.0)) for m in members),
            },
            "random_expected": expected.get(name, {"agent": 0.0, "step": 0.0}),
        }
    return {
        "dataset": settings.dataset,
        "attributor": settings.attributor,
        "settings": settings.as_dict(),
        "started_at": started_at.isoformat(),
        "wall_time_s": wall_time_s,
        "records_completed": len(first_seen),
        "results_lines": len(lines),
        "records_selected": records_selected,
        "out_dir": str(out_dir) if out_dir is not None else None,
        "structured_output": _structured_output(lines),
        "failure_reasons": _failure_reasons(lines),
        "subsets": subsets,
    }


async def run_benchmark(
    records: Sequence[BenchmarkRecord],
    attributor: Attributor,
    settings: BenchmarkSettings,
    *,
    out_dir: Path | None = None,
    resume: bool = True,
    on_outcome: Callable[[RecordOutcome], None] | None = None,
    on_plan: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run `settings.repeats` passes over `records`, score them and return the summary.

    With `out_dir`, results.jsonl grows one line per attributed record as the run
    proceeds and run.json records the run's identity and sessions; summary.json and
    report.md are written at the end. With `resume`, records (per seed) already in
    `out_dir`'s results.jsonl are not attributed again, new lines are appended, and the
    summary covers every line; a directory made with other settings raises
    ResumeMismatch naming the setting. `on_plan(finished, to_do)` is called once the
    work is known.
    """
    started_at = datetime.now(UTC)
    identity = settings.identity()
    earlier: list[dict[str, Any]] = []
    run_file: dict[str, Any] = {"identity": identity, "sessions": []}
    results_path: Path | None = None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        results_path = out_dir / RESULTS_FILE
        recorded = _read_run_file(out_dir)
        if resume and recorded is not None:
            _check_identity(out_dir, recorded["identity"], identity)
            run_file = recorded
            run_file.setdefault("sessions", [])
            try:
                earlier = read_results(results_path, repair=True)
            except ValueError as exc:
                raise ResumeMismatch(str(exc)) from None
        elif resume and results_path.is_file() and results_path.stat().st_size > 0:
            raise ResumeMismatch(
                f"{out_dir} has {RESULTS_FILE} but no {RUN_FILE} saying which settings made"
                " it; use another --out directory (or --no-resume to start it over)"
            )
        else:
            results_path.write_bytes(b"")

    done = {_result_key(line) for line in earlier}
    work = [
        [record for record in records if (record.record_id, seed) not in done]
        for seed in settings.seeds
    ]
    if on_plan is not None:
        to_do = sum(len(pending) for pending in work)
        on_plan(len(records) * len(settings.seeds) - to_do, to_do)

    session: dict[str, Any] = {
        "started_at": started_at.isoformat(),
        "settings": settings.as_dict(),
        "records_selected": len(records),
        "records_attributed": 0,
        "wall_time_s": 0.0,
    }
    run_file["sessions"].append(session)
    began = time.perf_counter()
    if out_dir is not None:
        _write_run_file(out_dir, run_file)

    new_lines: list[dict[str, Any]] = []
    results_file: IO[str] | None = None
    if results_path is not None:
        results_file = results_path.open("a", encoding="utf-8")

    def record_outcome(outcome: RecordOutcome) -> None:
        line = outcome.as_json()
        new_lines.append(line)
        if results_file is not None and out_dir is not None:
            results_file.write(json.dumps(line, ensure_ascii=False) + "\n")
            results_file.flush()
            session["records_attributed"] += 1
            session["wall_time_s"] = time.perf_counter() - began
            _write_run_file(out_dir, run_file)
        if on_outcome is not None:
            on_outcome(outcome)

    try:
        for repeat, (seed, pending) in enumerate(zip(settings.seeds, work, strict=True)):
            if not pending:
                continue
            options = AttributeOptions(
                use_ground_truth=settings.use_ground_truth,
                seed=seed,
                extra=dict(settings.attributor_config),
            )
            await attribute_records(
                pending,
                attributor,
                options,
                concurrency=settings.concurrency,
                repeat=repeat,
                on_outcome=record_outcome,
            )
    finally:
        if results_file is not None:
            results_file.close()
        session["wall_time_s"] = time.perf_counter() - began
        if out_dir is not None:
            _write_run_file(out_dir, run_file)

    wall_time = sum(float(s.get("wall_time_s", 0.0)) for s in run_file["sessions"])
    first_start = run_file["sessions"][0].get("started_at", started_at.isoformat())
    summary = summarise_results(
        [*earlier, *new_lines],
        settings,
        wall_time_s=wall_time,
        started_at=datetime.fromisoformat(first_start),
        out_dir=out_dir,
        records=records,
        records_selected=len(records),
    )
    summary["sessions"] = len(run_file["sessions"])
    summary["attributed_this_session"] = len(new_lines)
    if out_dir is not None:
        (out_dir / "summary.json").write_text(
            json.dumps(summary, indent=2) + "\n", encoding="utf-8"
        )
        (out_dir / "report.md").write_text(render_report(summary), encoding="utf-8")
        write_html_report(out_dir, summary, [*earlier, *new_lines])
    return summary


# --- command line ------------------------------------------------------------------


def _select(records: Sequence[BenchmarkRecord], limit: int | None) -> list[BenchmarkRecord]:
    if limit is None:
        return list(records)
    taken: dict[str, int] = {}
    selected = []
    for record in records:
        if taken.get(record.subset, 0) < limit:
            taken[record.subset] = taken.get(record.subset, 0) + 1
            selected.append(record)
    return selected


def _default_out_dir(dataset: str, attributor: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = Path("bench-out") / f"{dataset.replace(':', '-')}-{attributor}-{stamp}"
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


def _check_attributor(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value not in available_attributors():
        raise click.BadParameter(
            f"unknown attributor {value!r}; available: {', '.join(available_attributors())}",
            ctx=ctx,
            param=param,
        )
    return value


def _model_options(
    model: str | None,
    base_url: str | None,
    api_key: str | None,
    overrides: Mapping[str, Any],
) -> dict[str, Any]:
    values = {"model": model, "base_url": base_url, "api_key": api_key, **overrides}
    return {key: value for key, value in values.items() if value is not None}


@contextmanager
def _terminate_cleanly() -> Iterator[None]:
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
def _model_settings(
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


def _fold_models(
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


def _selection(
    records: Sequence[BenchmarkRecord],
    limit: int | None,
    records_file: Path | None,
    fraction: str | None,
    subset_seed: int,
) -> tuple[list[BenchmarkRecord], str]:
    if records_file is not None and fraction is not None:
        raise click.UsageError("give either --records or --fraction, not both")
    try:
        if records_file is not None:
            chosen = select_records(records, record_ids=read_record_ids(records_file))
            description = f"records listed in {records_file}"
        elif fraction is not None:
            share = parse_fraction(fraction)
            chosen = select_records(records, fraction=share, seed=subset_seed)
            description = (
                f"fraction {share} per subset: sorted record ids shuffled with"
                f" random.Random({subset_seed}), first round(n×{share})"
            )
        else:
            chosen, description = list(records), "all records"
    except SubsetError as exc:
        raise click.ClickException(str(exc)) from None
    if limit is not None:
        chosen = _select(chosen, limit)
        description += f", at most {limit} per subset"
    return chosen, description


@click.command(name="run")
@click.option(
    "--dataset",
    required=True,
    help="who_and_when[:algorithm-generated|:hand-crafted] or who_and_when_pro.",
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
    prefilter_top_k: int | None,
    prefilter_cv: int | None,
) -> None:
    """Score an attributor on a labelled dataset (accuracy, ±k, official-script, cost).

    Runs are resumable: rerun with the same --out to finish what an interrupted run left.
    """
    if dataset.strip().lower() not in DATASET_SPECS:
        raise click.BadParameter(
            f"unknown dataset {dataset!r}; valid: {', '.join(DATASET_SPECS)}",
            param_hint="'--dataset'",
        )
    is_llm = attributor in LLM_METHODS
    given_model = _model_options(
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
    if not is_llm and (given_model or local_model):
        raise click.UsageError(
            f"model options apply to the LLM methods ({', '.join(LLM_METHODS)}), not {attributor!r}"
        )
    if local_model is not None and (model or base_url or api_key):
        raise click.UsageError(
            "--local-model serves its own endpoint; drop --model/--base-url/--api-key"
        )
    on_who_and_when = dataset.strip().lower().split(":")[0] == "who_and_when"
    if prefilter_top_k is not None and (not is_llm or attributor == "step_by_step"):
        raise click.UsageError(
            "--prefilter applies to the LLM methods that take hints"
            f" ({', '.join(m for m in LLM_METHODS if m != 'step_by_step')}), not {attributor!r}"
        )
    if prefilter_cv is not None and (prefilter_top_k is None or not on_who_and_when):
        raise click.UsageError("--prefilter-cv needs --prefilter and a who_and_when dataset")
    if prefilter_top_k is not None and on_who_and_when:
        prefilter_cv = prefilter_cv or 5
    root = resolve_datasets_dir(datasets_dir)
    try:
        everything = list(load_dataset(dataset, root))
    except DatasetError as exc:
        # The message names the folder or file and field at fault.
        raise click.ClickException(str(exc)) from None
    records, selection = _selection(everything, limit, records_file, fraction, subset_seed)
    if not records:
        raise click.BadParameter(
            f"{dataset!r} has no records under {root}", param_hint="'--dataset'"
        )
    if cv_folds is not None:
        from faultfinder.benchmarks.cv import cross_validate_command

        cross_validate_command(
            records,
            attributor=attributor,
            folds=cv_folds,
            seeds=tuple(seed + r for r in range(cv_seeds)),
            use_ground_truth=with_ground_truth,
            out_dir=out if out is not None else _default_out_dir(dataset, f"{attributor}-cv"),
            as_json=as_json,
        )
        return
    if concurrency is None:
        concurrency = 1 if local_model is not None else 4
    stderr = Console(stderr=True)
    prefilter: dict[str, Any] | None = None
    prefilter_config: dict[str, Any] = {}
    label = attributor if prefilter_top_k is None else f"{attributor}-prefilter{prefilter_top_k}"
    out_dir = out if out is not None else _default_out_dir(dataset, label)
    if prefilter_top_k is not None:
        prefilter = {"top_k": prefilter_top_k, "cv_folds": prefilter_cv, "cv_seed": None}
        prefilter_config["prefilter_top_k"] = prefilter_top_k
        if prefilter_cv is not None:
            prefilter["cv_seed"] = seed
            # A directory whose hints came from folds split otherwise (before folds kept a
            # task's runs together) must not be continued with these.
            from faultfinder.benchmarks.train import FOLDS_BY

            prefilter["cv_folds_by"] = FOLDS_BY
            # Refuse a directory made with another pre-filter before spending time on training.
            try:
                recorded = _read_run_file(out_dir) if resume else None
                if recorded is not None:
                    identity = recorded["identity"]
                    _check_identity(out_dir, identity, {**identity, "prefilter": prefilter})
            except ResumeMismatch as exc:
                raise click.ClickException(str(exc)) from None
            prefilter_config["prefilter_model"] = _fold_models(
                root, records, prefilter_cv, seed, with_ground_truth, stderr
            )

    # One request at a time per record keeps a single local server from thrashing.
    given_model.setdefault("concurrency", concurrency)
    with (
        _terminate_cleanly(),
        _model_settings(
            is_llm, local_model, given_model, out_dir, context_tokens, local_threads, stderr
        ) as model_settings,
    ):
        config: dict[str, Any] = dict(prefilter_config)
        model_identity: str | None = None
        recorded_model: dict[str, Any] = {}
        if model_settings is not None:
            config["settings"] = model_settings
            model_identity = local_model or model_settings.model
            recorded_model = model_settings.model_dump(mode="json", exclude={"api_key"})
            if local_model is not None:
                recorded_model["local_model"] = local_model
        try:
            method = get_attributor(attributor, **config)
        except UnknownAttributorError as exc:
            raise click.BadParameter(str(exc), param_hint="'--attributor'") from None

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
            model_settings=recorded_model,
            selection=selection,
            prefilter=prefilter,
        )
        progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=stderr,
            transient=False,
        )
        with progress:
            task = progress.add_task(f"{attributor} on {dataset}", total=None)

            def plan(finished: int, to_do: int) -> None:
                if finished:
                    stderr.print(
                        f"resuming {out_dir}: {finished} of {finished + to_do} selected"
                        f" attributions already done, {to_do} to go"
                    )
                progress.update(task, total=to_do)

            try:
                summary = anyio.run(
                    lambda: run_benchmark(
                        records,
                        method,
                        settings,
                        out_dir=out_dir,
                        resume=resume,
                        on_outcome=lambda _: progress.advance(task),
                        on_plan=plan,
                    )
                )
            except ResumeMismatch as exc:
                raise click.ClickException(str(exc)) from None

    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    Console().print(_summary_table(summary))
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
