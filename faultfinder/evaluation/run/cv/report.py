"""The cross-validation summary of `faultfinder bench run --cv` as Markdown and as a table.

`render_cv_report` writes report.md (accuracy, first-error on the same folds, conformal
sets, the online auditor); `cv_table` is what the command prints. Every number is a
mean ± sample standard deviation over seeds (`pct`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table

from faultfinder.attributors.scoring import spread_percent as pct
from faultfinder.evaluation.run.reliability import render_reliability

__all__ = ["cv_table", "render_cv_report"]


def render_cv_report(summary: Mapping[str, Any]) -> str:
    """The CV summary as Markdown: accuracy, first-error on the same folds, conformal, auditor."""
    settings = summary["settings"]
    lines = [
        f"# {summary['attributor']} — {settings['folds']}-fold cross-validation",
        "",
        f"Seeds {settings['seeds']}; ground truth "
        f"{'used' if settings['use_ground_truth'] else 'withheld'}; "
        f"an ensemble of {len(settings['grid'])} models, inner {settings['inner_folds']}-fold "
        "CV for the agent rule, framework models, temperature and calibration. "
        "Every number is on held-out folds; mean ± sample std over seeds.",
        "",
        "| subset | n | agent % | step % | ±1 % | ±3 % | ±5 % "
        "| first_error agent % | first_error step % | random agent/step % |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, subset in summary["subsets"].items():
        a, fe, rnd = subset["accuracy"], subset["first_error"], subset["random_expected"]
        lines.append(
            f"| {name} | {subset['n']} | {pct(a['agent'])} | {pct(a['step'])} "
            f"| {pct(a['step_pm1'])} | {pct(a['step_pm3'])} | {pct(a['step_pm5'])} "
            f"| {pct(fe['agent'])} | {pct(fe['step'])} "
            f"| {100 * rnd['agent']:.1f} / {100 * rnd['step']:.1f} |"
        )
    lines += [
        "",
        "## Conformal prediction sets (held-out coverage, share of steps removed)",
        "",
        "| subset | α | coverage % | removed % |",
        "|---|---|---|---|",
    ]
    for name, subset in summary["subsets"].items():
        for alpha, stats in subset["conformal"].items():
            lines.append(
                f"| {name} | {alpha} | {pct(stats['coverage'])} | {pct(stats['removed'])} |"
            )
    lines += [
        "",
        "## Online auditor (first alarm on the prefix-only model)",
        "",
        "| subset | runs with alarm % | first alarm = gold step % | ±1 % | ±3 % "
        "| alarm agent = gold agent % | steps before end | share of run left % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, subset in summary["subsets"].items():
        au = subset["auditor"]
        lines.append(
            f"| {name} | {pct(au['alarm_rate'])} | {pct(au['first_alarm_precision'])} "
            f"| {pct(au['first_alarm_precision_pm1'])} | {pct(au['first_alarm_precision_pm3'])} "
            f"| {pct(au['first_alarm_agent_precision'])} "
            f"| {au['mean_steps_before_end']['mean']:.1f} "
            f"| {pct(au['mean_fraction_before_end'])} |"
        )
    for name, table in summary.get("reliability", {}).items():
        lines += [
            "",
            f"## Reliability: {name} (held-out folds, every seed)",
            "",
            *render_reliability(table),
        ]
    lines.append("")
    return "\n".join(lines)


def cv_table(summary: Mapping[str, Any]) -> Table:
    """The summary's headline numbers per subset, for the terminal."""
    table = Table(title=f"{summary['attributor']} on {summary['dataset']} (held-out folds)")
    for column in (
        "subset",
        "n",
        "agent %",
        "step %",
        "±1 %",
        "±3 %",
        "first_error agent/step %",
        "conformal α=0.1 cov/removed %",
        "auditor hit %",
    ):
        table.add_column(column, justify="left" if column == "subset" else "right")  # fmt: skip
    for name, subset in summary["subsets"].items():
        a, fe = subset["accuracy"], subset["first_error"]
        conformal = subset["conformal"].get("0.1")
        table.add_row(
            name,
            str(subset["n"]),
            pct(a["agent"]),
            pct(a["step"]),
            pct(a["step_pm1"]),
            pct(a["step_pm3"]),
            f"{100 * fe['agent']['mean']:.1f} / {100 * fe['step']['mean']:.1f}",
            (
                f"{100 * conformal['coverage']['mean']:.1f} / "
                f"{100 * conformal['removed']['mean']:.1f}"
                if conformal
                else "-"
            ),
            pct(subset["auditor"]["first_alarm_precision"]),
        )
    return table
