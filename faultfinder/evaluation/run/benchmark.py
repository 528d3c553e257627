"""`run_benchmark`, the reusable core of `faultfinder bench run`: records in, summary out,
results.jsonl appended as records finish, resumable, the report written at the end."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from faultfinder.attributors.base import AttributeOptions, Attributor
from faultfinder.datasets import BenchmarkRecord
from faultfinder.evaluation.run.attribution import (
    BenchmarkSettings,
    RecordOutcome,
    attribute_records,
)
from faultfinder.evaluation.run.checkpoint import (
    RESULTS_FILE,
    RUN_FILE,
    ResumeMismatch,
    check_identity,
    read_results,
    read_run_file,
    result_key,
    write_run_file,
)
from faultfinder.evaluation.run.plots import write_html_report
from faultfinder.evaluation.run.report import render_report
from faultfinder.evaluation.run.summary import summarise_results

__all__ = ["run_benchmark"]


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
    run_file, earlier = _open_run(out_dir, settings.identity(), resume)
    done = {result_key(line) for line in earlier}
    work = [
        [record for record in records if (record.record_id, seed) not in done]
        for seed in settings.seeds
    ]
    if on_plan is not None:
        to_do = sum(len(pending) for pending in work)
        on_plan(len(records) * len(settings.seeds) - to_do, to_do)

    entry: dict[str, Any] = {
        "started_at": started_at.isoformat(),
        "settings": settings.as_dict(),
        "records_selected": len(records),
        "records_attributed": 0,
        "wall_time_s": 0.0,
    }
    with _Session(run_file, entry, out_dir, on_outcome) as session:
        await _attribute_work(work, attributor, settings, session.record)

    wall_time = sum(float(s.get("wall_time_s", 0.0)) for s in run_file["sessions"])
    first_start = run_file["sessions"][0].get("started_at", started_at.isoformat())
    summary = summarise_results(
        [*earlier, *session.lines],
        settings,
        wall_time_s=wall_time,
        started_at=datetime.fromisoformat(first_start),
        out_dir=out_dir,
        records=records,
        records_selected=len(records),
    )
    summary["sessions"] = len(run_file["sessions"])
    summary["attributed_this_session"] = len(session.lines)
    if out_dir is not None:
        _write_reports(out_dir, summary, [*earlier, *session.lines])
    return summary


def _open_run(
    out_dir: Path | None, identity: dict[str, Any], resume: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run file and the result lines of earlier sessions: those in `out_dir` when
    resuming a run made with the same identity, none when starting (results.jsonl emptied)."""
    run_file: dict[str, Any] = {"identity": identity, "sessions": []}
    if out_dir is None:
        return run_file, []
    out_dir.mkdir(parents=True, exist_ok=True)
    results_path = out_dir / RESULTS_FILE
    recorded = read_run_file(out_dir)
    if resume and recorded is not None:
        check_identity(out_dir, recorded["identity"], identity)
        recorded.setdefault("sessions", [])
        try:
            return recorded, read_results(results_path, repair=True)
        except ValueError as exc:
            raise ResumeMismatch(str(exc)) from None
    if resume and results_path.is_file() and results_path.stat().st_size > 0:
        raise ResumeMismatch(
            f"{out_dir} has {RESULTS_FILE} but no {RUN_FILE} saying which settings made"
            " it; use another --out directory (or --no-resume to start it over)"
        )
    results_path.write_bytes(b"")
    return run_file, []


class _Session:
    """This invocation of a run, for the length of a `with` block: its entry in run.json,
    and the result lines it appends to results.jsonl as records finish (kept in memory
    only, without an output directory)."""

    def __init__(
        self,
        run_file: dict[str, Any],
        entry: dict[str, Any],
        out_dir: Path | None,
        on_outcome: Callable[[RecordOutcome], None] | None,
    ) -> None:
        self.run_file = run_file
        self.entry = entry
        self.out_dir = out_dir
        self.on_outcome = on_outcome
        self.lines: list[dict[str, Any]] = []
        self.began = 0.0
        self.results_file: IO[str] | None = None

    def __enter__(self) -> _Session:
        self.run_file["sessions"].append(self.entry)
        self.began = time.perf_counter()
        if self.out_dir is not None:
            write_run_file(self.out_dir, self.run_file)
            self.results_file = (self.out_dir / RESULTS_FILE).open("a", encoding="utf-8")
        return self

    def record(self, outcome: RecordOutcome) -> None:
        line = outcome.as_json()
        self.lines.append(line)
        if self.results_file is not None and self.out_dir is not None:
            self.results_file.write(json.dumps(line, ensure_ascii=False) + "\n")
            self.results_file.flush()
            self.entry["records_attributed"] += 1
            self.entry["wall_time_s"] = time.perf_counter() - self.began
            write_run_file(self.out_dir, self.run_file)
        if self.on_outcome is not None:
            self.on_outcome(outcome)

    def __exit__(self, *exc_info: object) -> None:
        if self.results_file is not None:
            self.results_file.close()
        self.entry["wall_time_s"] = time.perf_counter() - self.began
        if self.out_dir is not None:
            write_run_file(self.out_dir, self.run_file)


async def _attribute_work(
    work: Sequence[Sequence[BenchmarkRecord]],
    attributor: Attributor,
    settings: BenchmarkSettings,
    on_outcome: Callable[[RecordOutcome], None],
) -> None:
    """Attribute each seed's pending records, one repeat after the other."""
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
            on_outcome=on_outcome,
        )


def _write_reports(out_dir: Path, summary: dict[str, Any], lines: list[dict[str, Any]]) -> None:
    """summary.json, report.md and report.html."""
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out_dir / "report.md").write_text(render_report(summary), encoding="utf-8")
    write_html_report(out_dir, summary, lines)
