"""The Markdown report of a benchmark run, and of several runs on the same records, with our
numbers beside the published Who&When rows."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "PUBLISHED_ROWS",
    "MethodRow",
    "PublishedRow",
    "describe_rungs",
    "method_row",
    "render_comparison",
    "render_report",
]

ALGORITHM_GENERATED = "algorithm-generated"
HAND_CRAFTED = "hand-crafted"


@dataclass(frozen=True)
class PublishedRow:
    """A published Who&When result (percent), as listed in ATTRIBUTORS.md."""

    method: str
    subset: str
    with_ground_truth: bool
    agent: float | None
    step: float | None
    note: str = "GPT-4o"


_FITTED = "no model; rules fitted after seeing the data"

# Percent, GPT-4o unless noted, with the ground truth in the prompt unless marked.
PUBLISHED_ROWS: tuple[PublishedRow, ...] = (
    PublishedRow("random", ALGORITHM_GENERATED, True, 29.1, 12.0, "no model"),
    PublishedRow("all-at-once", ALGORITHM_GENERATED, True, 54.3, 12.5),
    PublishedRow("all-at-once", ALGORITHM_GENERATED, False, 51.1, 13.5),
    PublishedRow("step-by-step", ALGORITHM_GENERATED, True, 35.2, 25.5),
    PublishedRow("binary search", ALGORITHM_GENERATED, True, 44.1, 24.0),
    PublishedRow("A2P", ALGORITHM_GENERATED, True, None, 47.5, "gpt-oss-120b"),
    PublishedRow("first-error heuristic", ALGORITHM_GENERATED, True, 53.0, 29.0, _FITTED),
    PublishedRow("random", HAND_CRAFTED, True, 19.1, 4.2, "no model"),
    PublishedRow("all-at-once", HAND_CRAFTED, True, 55.2, 5.3),
    PublishedRow("all-at-once", HAND_CRAFTED, False, 53.4, 3.5),
    PublishedRow("step-by-step", HAND_CRAFTED, True, 34.5, 7.0),
    PublishedRow("binary search", HAND_CRAFTED, True, 51.7, 6.9),
    PublishedRow("hybrid", HAND_CRAFTED, True, 57.0, 12.3),
    PublishedRow("A2P", HAND_CRAFTED, True, None, 29.3, "model as published"),
    PublishedRow("first-error heuristic", HAND_CRAFTED, True, 40.0, 9.0, _FITTED),
)

_METRIC_LABELS = {
    "agent": "agent accuracy",
    "step": "step accuracy",
    "step_pm1": "step within ±1",
    "step_pm3": "step within ±3",
    "step_pm5": "step within ±5",
    "agent_and_step": "agent and step both right",
    "official_agent": "official-script agent accuracy",
    "official_step": "official-script step accuracy",
}
_SUBSET_TITLES = {ALGORITHM_GENERATED: "Algorithm-Generated", HAND_CRAFTED: "Hand-Crafted"}


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _ours(metric: Mapping[str, float], repeats: int) -> str:
    text = f"{100 * metric['mean']:.1f}"
    if repeats > 1:
        text += f" ± {100 * metric['std']:.1f}"
    return text


def _gt(flag: bool) -> str:
    return "with" if flag else "without"


def _subset_table(name: str, subset: Mapping[str, Any], summary: Mapping[str, Any]) -> list[str]:
    settings = summary["settings"]
    repeats = int(settings["repeats"])
    accuracy = subset["accuracy"]
    tolerances = [key for key in accuracy if key.startswith("step_pm")]
    title = _SUBSET_TITLES.get(name, name)
    lines = [
        f"## {title} (n = {subset['n']})",
        "",
        "| method | ground truth | agent % | step % | "
        + " | ".join(f"step ±{key.removeprefix('step_pm')} %" for key in tolerances)
        + " | official agent % | official step % | LLM calls/record | note |",
        "|---|---|---|---|" + "---|" * len(tolerances) + "---|---|---|---|",
    ]
    blank = " |" * len(tolerances)
    for row in PUBLISHED_ROWS:
        if row.subset != name:
            continue
        lines.append(
            f"| {row.method} (published) | {_gt(row.with_ground_truth)} |"
            f" {_pct(row.agent)} | {_pct(row.step)} |{blank} | | | {row.note} |"
        )
    expected = subset.get("random_expected")
    if expected is not None:
        lines.append(
            f"| random, analytical on these records | n/a | {100 * expected['agent']:.1f} |"
            f" {100 * expected['step']:.1f} |{blank} | | 0 | mean of 1/#agents, 1/#steps |"
        )
    calls = subset["cost"]["mean_llm_calls"]
    ours = " | ".join(_ours(accuracy[key], repeats) for key in tolerances)
    note = f"mean ± std over {repeats} repeats" if repeats > 1 else ""
    lines.append(
        f"| **{summary['attributor']} (ours)** | {_gt(bool(settings['use_ground_truth']))} |"
        f" {_ours(accuracy['agent'], repeats)} | {_ours(accuracy['step'], repeats)} | {ours} |"
        f" {_ours(accuracy['official_agent'], repeats)} |"
        f" {_ours(accuracy['official_step'], repeats)} | {calls:.2f} | {note} |"
    )
    lines.append("")
    return lines


def render_report(summary: Mapping[str, Any]) -> str:
    """Markdown for a run summary as written to summary.json."""
    settings = summary["settings"]
    lines = [
        f"# `{summary['attributor']}` on `{summary['dataset']}`",
        "",
        f"- ground truth in the input: {_gt(bool(settings['use_ground_truth']))}",
        f"- repeats: {settings['repeats']} (seeds {', '.join(map(str, settings['seeds']))})",
        f"- records: {summary['subsets']['overall']['n']}"
        + (f" ({settings['selection']})" if settings.get("selection") else "")
        + (f"; model {settings['model']}" if settings.get("model") else ""),
        f"- wall time: {summary['wall_time_s']:.1f} s, concurrency {settings['concurrency']}"
        + (f", {summary['sessions']} sessions" if summary.get("sessions", 1) > 1 else ""),
        "",
        "Our agent/step columns are exact: agent name matched after normalisation, 0-based"
        " step matched exactly (±k: within k steps). Our official columns reproduce the"
        " original Who&When `evaluate.py` (substring matching: gold step 1 also matches 12)."
        " Published rows are quoted as reported by their authors, whose scripts may use"
        " that substring rule; compare them with both. Failed attributions count as wrong.",
        "",
    ]
    for name, subset in summary["subsets"].items():
        if name == "overall":
            continue
        lines.extend(_subset_table(name, subset, summary))
    overall = summary["subsets"]["overall"]
    lines.extend(_subset_table("overall", overall, summary)[:2])
    cost = overall["cost"]
    lines.append(
        "| metric | value |\n|---|---|\n"
        + "\n".join(
            f"| {_METRIC_LABELS.get(key, key)} % | {_ours(value, int(settings['repeats']))} |"
            for key, value in overall["accuracy"].items()
        )
        + f"\n| failed attributions (mean per repeat) | {overall['failed']['mean']:.1f} |"
        + f"\n| mean LLM calls/record | {cost['mean_llm_calls']:.2f} |"
        + f"\n| mean prompt tokens/record | {cost['mean_prompt_tokens']:.0f} |"
        + f"\n| mean completion tokens/record | {cost['mean_completion_tokens']:.0f} |"
        + f"\n| mean latency/record | {cost['mean_latency_s']:.3f} s |"
        + "".join(
            f"\n| {label} | {cost[key]:,} |"
            for key, label in (
                ("total_llm_calls", "total LLM calls"),
                ("total_prompt_tokens", "total prompt tokens"),
                ("total_completion_tokens", "total completion tokens"),
            )
            if key in cost
        )
    )
    lines.append("")
    rungs = summary.get("structured_output") or {}
    if rungs.get("replies_by_rung"):
        lines.append(f"Structured output: {describe_rungs(rungs)}.")
        lines.append("")
    failures = summary.get("failure_reasons") or {}
    if failures:
        lines.append(
            "Failed attributions by reason: "
            + "; ".join(f"{reason} ({count})" for reason, count in failures.items())
            + "."
        )
        lines.append("")
    return "\n".join(lines)


def describe_rungs(rungs: Mapping[str, Any]) -> str:
    """One sentence on which structured-output rungs answered (from a summary's
    `structured_output`)."""
    replies = ", ".join(f"{rung} {count}" for rung, count in rungs["replies_by_rung"].items())
    text = f"replies by rung: {replies or 'none'}"
    for key, label in (
        ("records_with_rung_fallback", "records that fell back to a weaker rung"),
        ("records_with_invalid_reply", "records with an unusable reply asked again"),
        ("records_with_retried_error", "records with a retried call (timeout, HTTP error)"),
    ):
        if rungs.get(key):
            text += f"; {label}: {rungs[key]}"
    return text


# --- several runs on the same records -------------------------------------------------


@dataclass(frozen=True)
class MethodRow:
    """One run directory's results restricted to a set of records."""

    method: str
    model: str | None
    run_dir: str
    wanted: int
    summary: Mapping[str, Any]

    @property
    def completed(self) -> int:
        return int(self.summary["records_completed"])


def method_row(run_dir: Path, record_ids: Sequence[str] | None = None) -> MethodRow:
    """Summarise `run_dir`'s results.jsonl over `record_ids` (all its lines when None)."""
    # Imported here: the run package imports this module for render_report.
    from faultfinder.evaluation.run.attribution import BenchmarkSettings
    from faultfinder.evaluation.run.checkpoint import RESULTS_FILE, RUN_FILE, read_results
    from faultfinder.evaluation.run.summary import summarise_results

    identity = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))["identity"]
    lines = read_results(run_dir / RESULTS_FILE)
    if record_ids is not None:
        wanted = set(record_ids)
        lines = [line for line in lines if line["record_id"] in wanted]
    settings = BenchmarkSettings(
        dataset=identity["dataset"],
        attributor=identity["attributor"],
        use_ground_truth=bool(identity["use_ground_truth"]),
        model=identity.get("model"),
    )
    summary = summarise_results(
        lines,
        settings,
        # Per-record seconds add up to the wall time at concurrency 1 (no server start).
        wall_time_s=sum(float(line.get("latency_s", 0.0)) for line in lines),
        started_at=datetime.now(UTC),
        out_dir=run_dir,
    )
    return MethodRow(
        method=identity["attributor"],
        model=identity.get("model"),
        run_dir=str(run_dir),
        wanted=len(record_ids) if record_ids is not None else len(lines),
        summary=summary,
    )


def render_comparison(rows: Sequence[MethodRow], subset: str = ALGORITHM_GENERATED) -> str:
    """Markdown tables: accuracy and cost of each row on its records, then published rows."""
    accuracy = [
        "| method | model | records done | agent % | step % | step ±1 % | step ±3 % |"
        " official agent % | official step % | failed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    cost = [
        "| method | LLM calls (total / per record) | prompt tokens (total / per record) |"
        " completion tokens (total / per record) | s/record | wall time (sum of records) |"
        " structured output |",
        "|---|---|---|---|---|---|---|",
    ]
    expected_row = ""
    for row in rows:
        overall = row.summary["subsets"].get("overall")
        done = f"{row.completed}/{row.wanted}"
        if overall is not None and not expected_row and row.completed == row.wanted:
            expected = overall["random_expected"]
            expected_row = (
                f"| random, analytical expectation | — | {row.wanted} |"
                f" {100 * expected['agent']:.1f} | {100 * expected['step']:.1f} |" + " |" * 5
            )
        if overall is None:
            accuracy.append(f"| {row.method} | {row.model or '—'} | {done} |" + " — |" * 7)
            continue
        acc = overall["accuracy"]
        accuracy.append(
            f"| {row.method} | {row.model or '—'} | {done} |"
            + "".join(
                f" {100 * acc[key]['mean']:.1f} |"
                for key in (
                    "agent",
                    "step",
                    "step_pm1",
                    "step_pm3",
                    "official_agent",
                    "official_step",
                )
            )
            + f" {overall['failed']['mean']:.0f} |"
        )
        spent = overall["cost"]
        rungs = row.summary.get("structured_output") or {}
        cost.append(
            f"| {row.method} | {spent['total_llm_calls']} / {spent['mean_llm_calls']:.2f} |"
            f" {spent['total_prompt_tokens']:,} / {spent['mean_prompt_tokens']:,.0f} |"
            f" {spent['total_completion_tokens']:,} / {spent['mean_completion_tokens']:,.0f} |"
            f" {spent['mean_latency_s']:.1f} | {row.summary['wall_time_s'] / 60:.1f} min |"
            f" {describe_rungs(rungs) if rungs.get('replies_by_rung') else 'no model calls'} |"
        )
    if expected_row:
        accuracy.append(expected_row)
    published = [
        "| method (published) | ground truth | agent % | step % | note |",
        "|---|---|---|---|---|",
    ]
    for published_row in PUBLISHED_ROWS:
        if published_row.subset == subset:
            published.append(
                f"| {published_row.method} | {_gt(published_row.with_ground_truth)} |"
                f" {_pct(published_row.agent)} | {_pct(published_row.step)} |"
                f" {published_row.note} |"
            )
    return "\n".join([*accuracy, "", *cost, "", *published, ""])


def _main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m faultfinder.evaluation.run.report",
        description="Print comparison tables of several bench run directories on the same records.",
    )
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--records", type=Path, help="Record ids to restrict to, one per line.")
    args = parser.parse_args(argv)
    ids = None
    if args.records is not None:
        from faultfinder.evaluation.subsets import read_record_ids

        ids = read_record_ids(args.records)
    print(render_comparison([method_row(path, ids) for path in args.run_dirs]))


if __name__ == "__main__":
    _main()
