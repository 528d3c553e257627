"""The nightly run's report.html: this run's entries with their intervals and the gate's
verdicts, what changed against each baseline, and accuracy over time per attributor and
dataset (inline SVG, no scripts, like `bench run`'s report)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from faultfinder.evaluation.nightly.gate import describe
from faultfinder.evaluation.nightly.suite import IN_SAMPLE, in_sample
from faultfinder.evaluation.run.plots import HTML_REPORT_FILE, REPORT_STYLE, trend_chart
from faultfinder.server.store import BenchEntry, BenchRun

__all__ = ["render_nightly_report", "write_nightly_report"]

_STYLE = (
    REPORT_STYLE
    + """
tr.regression td { background: #fdecea; }
pre { white-space: pre-wrap; background: #f7f8fa; border: 1px solid #dde1e7; padding: .5rem; }
"""
)
"""`report.html`'s style with the rows the gate flags."""


def _percent(figure: Mapping[str, float]) -> str:
    return (
        f"{100 * figure['value']:.1f} <span class=note>[{100 * figure['lo']:.1f}–"
        f"{100 * figure['hi']:.1f}]</span>"
    )


def _time(ns: int | None) -> str:
    return "—" if ns is None else f"{datetime.fromtimestamp(ns / 1e9, UTC):%Y-%m-%d %H:%M:%S} UTC"


def render_nightly_report(
    run: BenchRun,
    entries: Sequence[BenchEntry],
    baselines: Mapping[int, BenchEntry],
    history: Sequence[BenchEntry],
) -> str:
    """The page for one suite run, `history` being the entries its trend charts draw."""
    from faultfinder.server.api.dashboard.trends import trend_charts

    title = f"Nightly run {run.id} (suite {run.suite})"
    regressions = [entry for entry in entries if entry.regression]
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="note">code {escape(run.code_version)} · started {_time(run.started_at)} ·'
        f" finished {_time(run.finished_at)} · {len(entries)} entries ·"
        f" {len(regressions)} worse than their baseline beyond noise</p>",
        "<h2>Entries</h2>",
        '<p class="note">Accuracy in percent over all of the entry\'s records, with its 95 %'
        " Wilson interval. The gate compares each entry with its last accepted one on the"
        " records both scored (one-sided exact McNemar test per metric).</p>",
        "<table><thead><tr><th>entry</th><th>records</th><th>agent %</th><th>step %</th>"
        "<th>tokens</th><th>wall time</th><th>gate</th></tr></thead><tbody>",
    ]
    for entry in entries:
        overall = entry.figures.get("overall", {})
        mark = f" <span class=note>({IN_SAMPLE})</span>" if in_sample(entry.definition) else ""
        parts.append(
            f"<tr{' class=regression' if entry.regression else ''}>"
            f"<td>{escape(entry.entry)}{mark}</td><td class=num>{entry.n_records}</td>"
            f"<td class=num>{_percent(overall['agent'])}</td>"
            f"<td class=num>{_percent(overall['step'])}</td>"
            f"<td class=num>{entry.prompt_tokens + entry.completion_tokens}</td>"
            f"<td class=num>{entry.wall_time_s:.1f} s</td><td>{escape(entry.verdict)}</td></tr>"
        )
    parts.append("</tbody></table>")
    if any(in_sample(entry.definition) for entry in entries):
        parts.append(
            f'<p class="note">{IN_SAMPLE}: the attributor was trained on that dataset; its'
            " figures show change from night to night, not held-out accuracy.</p>"
        )
    skipped = [item for item in run.plan if item.get("skipped")]
    if skipped:
        parts.append(
            '<p class="note">Skipped: '
            + "; ".join(f"{escape(str(i['entry']))} ({escape(str(i['skipped']))})" for i in skipped)
            + "</p>"
        )
    changes = [
        line
        for entry in entries
        for line in describe(entry, baselines.get(entry.baseline_id or -1))
    ]
    parts.append("<h2>Changes against the baselines</h2>")
    parts.append(
        f"<pre>{escape(chr(10).join(changes))}</pre>"
        if changes
        else '<p class="note">No record changed against its baseline.</p>'
    )
    parts.append("<h2>Accuracy over time</h2>")
    parts.append(
        '<p class="note">One point per suite run; the bar is its 95 % interval, a red ring a'
        " regression the gate flagged.</p>"
    )
    for chart in trend_charts(history):
        parts += [f"<h3>{escape(chart.title)}</h3>", trend_chart(chart)]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_nightly_report(
    folder: Path,
    run: BenchRun,
    entries: Sequence[BenchEntry],
    baselines: Mapping[int, BenchEntry],
    history: Sequence[BenchEntry],
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / HTML_REPORT_FILE
    path.write_text(render_nightly_report(run, entries, baselines, history), encoding="utf-8")
    return path
