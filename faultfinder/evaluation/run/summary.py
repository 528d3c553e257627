"""The summary of a benchmark run's result lines: accuracy per subset with its spread over
repeats, cost, the structured-output rungs that answered and why attributions failed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from faultfinder.attributors.scoring import OVERALL, RecordScore, ScoredRecord, aggregate, spread
from faultfinder.datasets import BenchmarkRecord
from faultfinder.evaluation.run.attribution import (
    BenchmarkSettings,
    mean_expectations,
    random_expected,
)

__all__ = ["summarise_results"]


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
            expectations.append((str(line["subset"]), random_expected(by_id[record_id])))
    expected = mean_expectations(expectations)

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
