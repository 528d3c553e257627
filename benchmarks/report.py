"""The Markdown report of a benchmark run: our numbers beside the published Who&When rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PUBLISHED_ROWS", "PublishedRow", "render_report"]

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


# Percent, GPT-4o unless noted, with the ground truth in the prompt unless marked.
PUBLISHED_ROWS: tuple[PublishedRow, ...] = (
    PublishedRow("random", ALGORITHM_GENERATED, True, 29.1, 12.0, "no model"),
    PublishedRow("all-at-once", ALGORITHM_GENERATED, True, 54.3, 12.5),
    PublishedRow("all-at-once", ALGORITHM_GENERATED, False, 51.1, 13.5),
    PublishedRow("step-by-step", ALGORITHM_GENERATED, True, 35.2, 25.5),
    PublishedRow("binary search", ALGORITHM_GENERATED, True, 44.1, 24.0),
    PublishedRow("A2P", ALGORITHM_GENERATED, True, None, 47.5, "gpt-oss-120b"),
    PublishedRow(
        "first-error heuristic",
        ALGORITHM_GENERATED,
        True,
        53.0,
        29.0,
        "no model; rules fitted after seeing the data",
    ),
    PublishedRow("random", HAND_CRAFTED, True, 19.1, 4.2, "no model"),
    PublishedRow("all-at-once", HAND_CRAFTED, True, 55.2, 5.3),
    PublishedRow("all-at-once", HAND_CRAFTED, False, 53.4, 3.5),
    PublishedRow("step-by-step", HAND_CRAFTED, True, 34.5, 7.0),
    PublishedRow("binary search", HAND_CRAFTED, True, 51.7, 6.9),
    PublishedRow("hybrid", HAND_CRAFTED, True, 57.0, 12.3),
    PublishedRow("A2P", HAND_CRAFTED, True, None, 29.3, "model as published"),
    PublishedRow(
        "first-error heuristic",
        HAND_CRAFTED,
        True,
        40.0,
        9.0,
        "no model; rules fitted after seeing the data",
    ),
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
        + (f" (limit {settings['limit']})" if settings.get("limit") else ""),
        f"- wall time: {summary['wall_time_s']:.1f} s, concurrency {settings['concurrency']}",
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
    )
    lines.append("")
    return "\n".join(lines)
