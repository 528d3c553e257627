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
from faultfinder.benchmarks.datasets import BenchmarkRecord
from faultfinder.benchmarks.plots import write_html_report
from faultfinder.benchmarks.report import render_report
from faultfinder.benchmarks.run.attribution import (
    BenchmarkSettings,
    RecordOutcome,
    attribute_records,
)
from faultfinder.benchmarks.run.checkpoint import (
    RESULTS_FILE,
    RUN_FILE,
    ResumeMismatch,
    check_identity,
    read_results,
    read_run_file,
    result_key,
    write_run_file,
)
from faultfinder.benchmarks.run.summary import summarise_results

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
    identity = settings.identity()
    earlier: list[dict[str, Any]] = []
    run_file: dict[str, Any] = {"identity": identity, "sessions": []}
    results_path: Path | None = None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        results_path = out_dir / RESULTS_FILE
        recorded = read_run_file(out_dir)
        if resume and recorded is not None:
            check_identity(out_dir, recorded["identity"], identity)
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

    done = {result_key(line) for line in earlier}
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
        write_run_file(out_dir, run_file)

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
            write_run_file(out_dir, run_file)
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
            write_run_file(out_dir, run_file)

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
