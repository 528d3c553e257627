"""The HTML report of a benchmark run: inline-SVG charts (no scripts, no external assets).

Charts: accuracy beside the published Who&When baselines per subset, the distribution
of step errors (predicted − gold step), and, when a model was called, accuracy by
tokens spent. Every figure drawn is also printed as text in a table. The nightly report
draws its accuracy trends here too (`trend_chart`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultfinder.evaluation.run.report import PUBLISHED_ROWS

if TYPE_CHECKING:
    from faultfinder.server.api.dashboard.trends import TrendChart

__all__ = [
    "HTML_REPORT_FILE",
    "REPORT_STYLE",
    "error_bins",
    "render_html_report",
    "step_errors",
    "token_bins",
    "trend_chart",
    "write_html_report",
]

HTML_REPORT_FILE = "report.html"
ERROR_RANGE = 10
"""Step errors beyond ±ERROR_RANGE are pooled into the two outermost bins."""
AGENT_COLOUR = "#4e79a7"
STEP_COLOUR = "#f28e2b"
PUBLISHED_FILL = 0.55
"""Opacity of published rows' bars, so our own rows stand out."""

REPORT_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; color: #1d2330; margin: 2rem auto; max-width: 1000px;
  padding: 0 1rem; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: .6rem 0; }
th, td { border-bottom: 1px solid #dde1e7; padding: .25rem .6rem; text-align: left; }
th { font-size: 12px; color: #5f6b7a; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
svg { max-width: 100%; height: auto; } svg text { font-size: 11px; fill: #1d2330; }
.note { color: #5f6b7a; } .ours td { font-weight: 600; }
"""


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _text(x: float, y: float, text: str, *, anchor: str = "start", bold: bool = False) -> str:
    weight = ' font-weight="bold"' if bold else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" dominant-baseline="middle"'
        f"{weight}>{escape(text)}</text>"
    )


def _rect(x: float, y: float, width: float, height: float, colour: str, title: str,
          opacity: float = 1.0) -> str:  # fmt: skip
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(width, 0):.1f}" height="{max(height, 0):.1f}"'
        f' fill="{colour}" fill-opacity="{opacity:g}"><title>{escape(title)}</title></rect>'
    )


def _svg(width: int, height: int, label: str, body: Sequence[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}"'
        f' height="{height}" role="img" aria-label="{escape(label)}">' + "".join(body) + "</svg>"
    )


def _legend(x: float, y: float) -> list[str]:
    return [
        _rect(x, y - 5, 10, 10, AGENT_COLOUR, "agent accuracy"),
        _text(x + 14, y, "agent accuracy %"),
        _rect(x + 130, y - 5, 10, 10, STEP_COLOUR, "step accuracy"),
        _text(x + 144, y, "step accuracy %"),
    ]


# --- accuracy vs published baselines ------------------------------------------------------


@dataclass(frozen=True)
class AccuracyRow:
    """One method's agent and step accuracy in percent (None: not reported)."""

    label: str
    agent: float | None
    step: float | None
    ours: bool = False


def accuracy_rows(name: str, subset: Mapping[str, Any], attributor: str,
                  use_ground_truth: bool) -> list[AccuracyRow]:  # fmt: skip
    """Published rows for subset `name`, the analytical random baseline and ours."""
    rows = [
        AccuracyRow(
            f"{row.method} (published{'' if row.with_ground_truth else ', no ground truth'})",
            row.agent,
            row.step,
        )
        for row in PUBLISHED_ROWS
        if row.subset == name
    ]
    expected = subset.get("random_expected")
    if expected is not None:
        rows.append(
            AccuracyRow(
                "random, analytical on these records",
                100 * float(expected["agent"]),
                100 * float(expected["step"]),
            )
        )
    accuracy = subset["accuracy"]
    suffix = "" if use_ground_truth else ", no ground truth"
    rows.append(
        AccuracyRow(
            f"{attributor} (ours{suffix})",
            100 * float(accuracy["agent"]["mean"]),
            100 * float(accuracy["step"]["mean"]),
            ours=True,
        )
    )
    return rows


def accuracy_chart(rows: Sequence[AccuracyRow], title: str) -> str:
    """Horizontal grouped bars: agent and step accuracy per method, 0–100 %."""
    left, right, row_height, top = 280, 60, 34, 28
    width = 860
    height = top + row_height * len(rows) + 24
    scale = (width - left - right) / 100
    body = _legend(left, 12)
    for tick in range(0, 101, 20):
        x = left + tick * scale
        body.append(
            f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 20}" stroke="#dde1e7"/>'
        )
        body.append(_text(x, height - 10, f"{tick}", anchor="middle"))
    for position, row in enumerate(rows):
        y = top + position * row_height
        opacity = 1.0 if row.ours else PUBLISHED_FILL
        body.append(_text(left - 8, y + row_height / 2 - 2, row.label, anchor="end", bold=row.ours))
        for offset, value, colour, metric in (
            (0, row.agent, AGENT_COLOUR, "agent"),
            (13, row.step, STEP_COLOUR, "step"),
        ):
            bar_y = y + 3 + offset
            if value is None:
                body.append(_text(left + 4, bar_y + 6, "n/a"))
                continue
            tip = f"{row.label}: {metric} accuracy {value:.1f} %"
            body.append(_rect(left, bar_y, value * scale, 12, colour, tip, opacity))
            body.append(_text(left + value * scale + 4, bar_y + 6, _pct(value)))
    return _svg(width, height, title, body)


def _accuracy_table(rows: Sequence[AccuracyRow]) -> str:
    cells = "".join(
        f"<tr{' class=ours' if row.ours else ''}><td>{escape(row.label)}</td>"
        f'<td class="num">{_pct(row.agent)}</td><td class="num">{_pct(row.step)}</td></tr>'
        for row in rows
    )
    return (
        "<table><thead><tr><th>method</th><th>agent %</th><th>step %</th></tr></thead>"
        f"<tbody>{cells}</tbody></table>"
    )


# --- step errors ------------------------------------------------------------------------


def step_errors(lines: Sequence[Mapping[str, Any]]) -> Counter[int]:
    """Predicted − gold step of every answered record (failed attributions excluded)."""
    errors: Counter[int] = Counter()
    for line in lines:
        attribution = line.get("attribution") or {}
        step = attribution.get("step")
        gold = (line.get("gold") or {}).get("step")
        if attribution.get("status") == "ok" and isinstance(step, int) and isinstance(gold, int):
            errors[step - gold] += 1
    return errors


def error_bins(errors: Counter[int]) -> list[tuple[str, int]]:
    """(label, records) for −ERROR_RANGE…+ERROR_RANGE, the outermost bins pooling the tails."""
    pooled: Counter[int] = Counter()
    for error, count in errors.items():
        pooled[max(-ERROR_RANGE, min(ERROR_RANGE, error))] += count
    bins = []
    for error in range(-ERROR_RANGE, ERROR_RANGE + 1):
        if error == -ERROR_RANGE:
            label = f"≤{error}"
        elif error == ERROR_RANGE:
            label = f"≥+{error}"
        else:
            label = f"{error:+d}" if error else "0"
        bins.append((label, pooled.get(error, 0)))
    return bins


def step_error_chart(errors: Counter[int]) -> str:
    """Histogram of step errors (see `error_bins`); the exact hits are drawn green."""
    bins = error_bins(errors)
    width, height, left, bottom, top = 860, 260, 40, 40, 20
    most = max((count for _, count in bins), default=0) or 1
    slot = (width - left - 10) / len(bins)
    body: list[str] = []
    for position, (label, count) in enumerate(bins):
        size = (height - bottom - top) * count / most
        x = left + position * slot
        colour = "#59a14f" if label == "0" else "#9c755f"
        body.append(
            _rect(x + 2, height - bottom - size, slot - 4, size, colour, f"{label}: {count}")
        )
        if count:
            body.append(
                _text(x + slot / 2, height - bottom - size - 8, str(count), anchor="middle")
            )
        body.append(_text(x + slot / 2, height - bottom + 12, label, anchor="middle"))
    body.append(_text(width / 2, height - 8, "predicted step − gold step", anchor="middle"))
    return _svg(width, height, "Distribution of step errors", body)


# --- tokens vs accuracy -----------------------------------------------------------------


@dataclass(frozen=True)
class TokenBin:
    records: int
    mean_tokens: float
    agent: float
    """Percent of the bin's records with the right agent."""
    step: float


def token_bins(lines: Sequence[Mapping[str, Any]], bins: int = 4) -> list[TokenBin]:
    """Records ordered by tokens spent and cut into `bins` equal groups, with each group's
    accuracy; empty when no record spent tokens."""
    spent = [
        (
            int(line.get("prompt_tokens", 0)) + int(line.get("completion_tokens", 0)),
            bool((line.get("score") or {}).get("agent")),
            bool((line.get("score") or {}).get("step")),
        )
        for line in lines
    ]
    if not any(tokens for tokens, _, _ in spent):
        return []
    spent.sort(key=lambda item: item[0])
    size = math.ceil(len(spent) / max(1, min(bins, len(spent))))
    groups = [spent[start : start + size] for start in range(0, len(spent), size)]
    return [
        TokenBin(
            records=len(group),
            mean_tokens=sum(t for t, _, _ in group) / len(group),
            agent=100 * sum(a for _, a, _ in group) / len(group),
            step=100 * sum(s for _, _, s in group) / len(group),
        )
        for group in groups
    ]


def token_chart(groups: Sequence[TokenBin]) -> str:
    """Accuracy (y) against mean tokens per record (x, log scale) for each token group."""
    width, height, left, bottom, top, right = 860, 280, 50, 40, 30, 30
    low = math.log10(max(min(g.mean_tokens for g in groups), 1))
    high = math.log10(max(max(g.mean_tokens for g in groups), 10))
    if high - low < 1e-9:
        low, high = low - 0.5, high + 0.5

    def x_of(tokens: float) -> float:
        return left + (math.log10(max(tokens, 1)) - low) / (high - low) * (width - left - right)

    def y_of(percent: float) -> float:
        return height - bottom - percent / 100 * (height - bottom - top)

    body = _legend(left, 12)
    for tick in range(0, 101, 25):
        body.append(
            f'<line x1="{left}" y1="{y_of(tick):.1f}" x2="{width - right}" y2="{y_of(tick):.1f}"'
            ' stroke="#dde1e7"/>'
        )
        body.append(_text(left - 6, y_of(tick), str(tick), anchor="end"))
    for metric, colour in (("agent", AGENT_COLOUR), ("step", STEP_COLOUR)):
        points = [(x_of(g.mean_tokens), y_of(getattr(g, metric))) for g in groups]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        body.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for group, (x, y) in zip(groups, points, strict=True):
            tip = f"{group.records} records, {group.mean_tokens:.0f} tokens: {metric} " + _pct(
                getattr(group, metric)
            )
            body.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}">'
                f"<title>{escape(tip)}</title></circle>"
            )
    for group in groups:
        body.append(
            _text(
                x_of(group.mean_tokens),
                height - bottom + 14,
                f"{group.mean_tokens:.0f}",
                anchor="middle",
            )
        )
    body.append(_text(width / 2, height - 8, "mean tokens per record (log scale)", anchor="middle"))
    return _svg(width, height, "Accuracy by tokens spent", body)


# --- nightly trends ---------------------------------------------------------------------

REGRESSION_COLOUR = "#b3261e"


def trend_chart(chart: TrendChart) -> str:
    """Accuracy over the suite runs: a line per attributor, each point's 95 % interval as a
    bar and the gate's regressions ringed red (the geometry of the dashboard's chart)."""
    body: list[str] = []
    for y, tick in chart.y_ticks:
        body.append(
            f'<line x1="{chart.left}" y1="{y:.1f}" x2="{chart.width - chart.right}" y2="{y:.1f}"'
            ' stroke="#dde1e7"/>'
        )
        body.append(_text(chart.left - 6, y, f"{tick} %", anchor="end"))
    for x, anchor, label in chart.x_labels:
        body.append(_text(x, chart.height - 12, label, anchor=anchor))
    for line in chart.lines:
        if len(line.points) > 1:
            body.append(
                f'<polyline points="{line.path}" fill="none" stroke="{line.colour}"'
                ' stroke-width="2"/>'
            )
        for point in line.points:
            body.append(
                f'<line x1="{point.x:.1f}" y1="{point.lo:.1f}" x2="{point.x:.1f}"'
                f' y2="{point.hi:.1f}" stroke="{line.colour}" stroke-opacity="0.6"/>'
            )
            ring = (
                f' r="6" stroke="{REGRESSION_COLOUR}" stroke-width="3" class="regression"'
                if point.regression
                else ' r="4"'
            )
            body.append(
                f'<circle cx="{point.x:.1f}" cy="{point.y:.1f}"{ring} fill="{line.colour}">'
                f"<title>{escape(point.title)}</title></circle>"
            )
    legend_y = chart.height + 6
    x = float(chart.left)
    for line in chart.lines:
        body.append(_rect(x, legend_y - 8, 10, 10, line.colour, line.attributor))
        body.append(_text(x + 14, legend_y - 3, line.attributor))
        x += 24 + 7 * len(line.attributor)
    return _svg(chart.width, chart.height + 14, chart.title, body)


# --- the page ---------------------------------------------------------------------------


def render_html_report(summary: Mapping[str, Any], lines: Sequence[Mapping[str, Any]]) -> str:
    """The whole report page for a run summary (summary.json) and its results lines."""
    settings = summary["settings"]
    attributor = str(summary["attributor"])
    use_ground_truth = bool(settings.get("use_ground_truth", True))
    title = f"{attributor} on {summary['dataset']}"
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{REPORT_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="note">ground truth in the input: {"with" if use_ground_truth else "without"}'
        f" · repeats {escape(str(settings.get('repeats', 1)))}"
        f" · records {escape(str(summary['subsets']['overall']['n']))}"
        f" · wall time {float(summary.get('wall_time_s', 0.0)):.1f} s</p>",
        '<p class="note">Agent and step accuracy are exact matches (0-based step). Published'
        " rows are quoted from their papers (GPT-4o unless noted) and drawn lighter.</p>",
    ]
    for name, subset in summary["subsets"].items():
        rows = accuracy_rows(name, subset, attributor, use_ground_truth)
        heading = f"Accuracy — {name} (n = {subset['n']})"
        parts += [f"<h2>{escape(heading)}</h2>", accuracy_chart(rows, heading)]
        parts.append(_accuracy_table(rows))
    errors = step_errors(lines)
    answered = sum(errors.values())
    parts.append("<h2>Step error (predicted − gold)</h2>")
    if answered:
        exact = errors.get(0, 0)
        bins = error_bins(errors)
        parts += [
            f'<p class="note">{answered} answered attributions; {exact} exactly on the gold'
            f" step ({100 * exact / answered:.1f} %), {sum(n for e, n in errors.items() if e < 0)}"
            f" early, {sum(n for e, n in errors.items() if e > 0)} late.</p>",
            step_error_chart(errors),
            "<table><thead><tr><th>error</th>"
            + "".join(f'<td class="num">{escape(label)}</td>' for label, _ in bins)
            + "</tr></thead><tbody><tr><th>records</th>"
            + "".join(f'<td class="num">{count}</td>' for _, count in bins)
            + "</tr></tbody></table>",
        ]
    else:
        parts.append('<p class="note">No answered attributions to compare.</p>')
    groups = token_bins(lines)
    if groups:
        parts += [
            "<h2>Accuracy by tokens spent</h2>",
            '<p class="note">Records sorted by prompt + completion tokens and cut into equal'
            " groups.</p>",
            token_chart(groups),
            "<table><thead><tr><th>records</th><th>mean tokens</th><th>agent %</th>"
            "<th>step %</th></tr></thead><tbody>"
            + "".join(
                f'<tr><td class="num">{g.records}</td><td class="num">{g.mean_tokens:.0f}</td>'
                f'<td class="num">{_pct(g.agent)}</td><td class="num">{_pct(g.step)}</td></tr>'
                for g in groups
            )
            + "</tbody></table>",
        ]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_html_report(
    out_dir: Path, summary: Mapping[str, Any], lines: Sequence[Mapping[str, Any]]
) -> Path:
    """Write report.html into `out_dir`; returns its path."""
    path = out_dir / HTML_REPORT_FILE
    path.write_text(render_html_report(summary, lines), encoding="utf-8")
    return path
