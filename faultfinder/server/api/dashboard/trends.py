"""The nightly benchmark's trend charts: for each dataset and settings, one chart per metric
with a line per attributor over the suite runs, each point with its 95 % interval and the
gate's regressions marked. Geometry only; the dashboard's template and the benchmark's
report.html each draw it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from faultfinder.server.api.dashboard.render import PALETTE
from faultfinder.server.store import BenchEntry, BenchVerdict

__all__ = [
    "TREND_METRICS",
    "TrendChart",
    "TrendLine",
    "TrendPoint",
    "entry_figure",
    "nightly_rows",
    "regressed_metrics",
    "trend_charts",
]

TREND_METRICS: dict[str, str] = {"step": "step accuracy", "agent": "agent accuracy"}
"""The metrics drawn, with their captions."""
OVERALL = "overall"
MAX_X_LABELS = 6


def regressed_metrics(entry: BenchEntry) -> set[str]:
    """The metrics on which the gate found `entry` worse than its baseline beyond noise."""
    if entry.verdict != BenchVerdict.REGRESSION or not entry.gate:
        return set()
    return {str(m["metric"]) for m in entry.gate.get("metrics", []) if m.get("regressed")}


def entry_figure(entry: BenchEntry, metric: str) -> Mapping[str, Any]:
    """`{"value", "lo", "hi", "n", "hits"}` of one metric over all of an entry's records."""
    figure = (entry.figures.get(OVERALL) or {}).get(metric)
    if isinstance(figure, Mapping):
        return figure
    value = entry.step_accuracy if metric == "step" else entry.agent_accuracy
    return {"value": value, "lo": value, "hi": value, "n": entry.n_records}


@dataclass(frozen=True)
class TrendPoint:
    x: float
    y: float
    lo: float
    """The interval's lower end, in pixels (below `y`)."""
    hi: float
    value: float
    """The accuracy, a fraction."""
    entry_id: int | None
    run_id: str
    verdict: str
    regression: bool
    """The gate found the entry worse beyond noise on this chart's metric."""
    title: str


@dataclass(frozen=True)
class TrendLine:
    attributor: str
    colour: str
    points: list[TrendPoint]

    @property
    def path(self) -> str:
        """SVG polyline points."""
        return " ".join(f"{point.x:.1f},{point.y:.1f}" for point in self.points)


@dataclass
class TrendChart:
    dataset: str
    settings: str
    metric: str
    caption: str
    width: int = 720
    height: int = 240
    left: int = 44
    right: int = 16
    top: int = 12
    bottom: int = 34
    lines: list[TrendLine] = field(default_factory=list)
    x_labels: list[tuple[float, str, str]] = field(default_factory=list)
    """(x, text anchor, text) under the suite runs labelled."""
    y_ticks: list[tuple[float, str]] = field(default_factory=list)

    @property
    def title(self) -> str:
        return f"{self.caption} on {self.dataset} ({self.settings})"

    @property
    def regressions(self) -> int:
        return sum(point.regression for line in self.lines for point in line.points)

    def y_of(self, fraction: float) -> float:
        return self.top + (1 - fraction) * (self.height - self.top - self.bottom)


def _run_order(entries: Sequence[BenchEntry]) -> dict[str, tuple[int, int]]:
    """Each suite run's position (0 = oldest) and when its first entry was stored."""
    first: dict[str, int] = {}
    for entry in entries:
        first[entry.run_id] = min(first.get(entry.run_id, entry.created_at), entry.created_at)
    ordered = sorted(first, key=lambda run: (first[run], run))
    return {run: (position, first[run]) for position, run in enumerate(ordered)}


def trend_charts(
    entries: Sequence[BenchEntry], metrics: Sequence[str] = tuple(TREND_METRICS)
) -> list[TrendChart]:
    """A chart per (dataset, settings) and metric, the suite runs along x in order."""
    runs = _run_order(entries)
    attributors = sorted({entry.attributor for entry in entries})
    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(attributors)}
    groups: dict[tuple[str, str], list[BenchEntry]] = {}
    for entry in entries:
        groups.setdefault((entry.dataset, entry.settings), []).append(entry)
    charts = []
    for (dataset, settings), members in sorted(groups.items()):
        for metric in metrics:
            chart = TrendChart(dataset, settings, metric, TREND_METRICS.get(metric, metric))
            _draw(chart, members, runs, colours)
            charts.append(chart)
    return charts


def _draw(
    chart: TrendChart,
    members: Sequence[BenchEntry],
    runs: Mapping[str, tuple[int, int]],
    colours: Mapping[str, str],
) -> None:
    span = chart.width - chart.left - chart.right
    count = len(runs)

    def x_of(position: int) -> float:
        if count <= 1:
            return chart.left + span / 2
        return chart.left + 8 + position * (span - 16) / (count - 1)

    by_attributor: dict[str, list[BenchEntry]] = {}
    for entry in members:
        by_attributor.setdefault(entry.attributor, []).append(entry)
    for attributor in sorted(by_attributor):
        points = []
        for entry in sorted(by_attributor[attributor], key=lambda e: runs[e.run_id]):
            figure = entry_figure(entry, chart.metric)
            value = float(figure["value"])
            lo, hi = float(figure.get("lo", value)), float(figure.get("hi", value))
            stamp = datetime.fromtimestamp(entry.created_at / 1e9, UTC)
            regression = chart.metric in regressed_metrics(entry)
            title = (
                f"{attributor} on {entry.dataset} ({entry.settings}), run {entry.run_id}"
                f" {stamp:%Y-%m-%d %H:%M} UTC: {chart.caption} {100 * value:.1f} %"
                f" (95 % interval {100 * lo:.1f}–{100 * hi:.1f} %, {entry.n_records} records),"
                f" code {entry.code_version}, "
                + (f"worse than #{entry.baseline_id} beyond noise" if regression else entry.verdict)
            )
            points.append(
                TrendPoint(
                    x=x_of(runs[entry.run_id][0]),
                    y=chart.y_of(value),
                    lo=chart.y_of(lo),
                    hi=chart.y_of(hi),
                    value=value,
                    entry_id=entry.id,
                    run_id=entry.run_id,
                    verdict=entry.verdict,
                    regression=regression,
                    title=title,
                )
            )
        chart.lines.append(TrendLine(attributor, colours[attributor], points))
    chart.y_ticks = [(chart.y_of(tick / 100), f"{tick}") for tick in range(0, 101, 25)]
    step = max(1, -(-count // MAX_X_LABELS))
    for position, started in runs.values():
        if position % step == 0 or position == count - 1:
            stamp = datetime.fromtimestamp(started / 1e9, UTC)
            # The last label ends at its run: centred, it would run past the chart.
            anchor = "end" if count > 1 and position == count - 1 else "middle"
            chart.x_labels.append((x_of(position), anchor, f"{stamp:%m-%d %H:%M}"))


@dataclass(frozen=True)
class GateChange:
    """One gated metric's change against the baseline, as the page states it."""

    metric: str
    before: float
    after: float
    worse: list[str]
    better: list[str]
    p_value: float
    regressed: bool


@dataclass(frozen=True)
class NightlyRow:
    """One entry of the history as the nightly page lists it."""

    entry: BenchEntry
    agent: Mapping[str, Any]
    step: Mapping[str, Any]
    changes: list[GateChange]

    @property
    def tokens(self) -> int:
        return self.entry.prompt_tokens + self.entry.completion_tokens


def nightly_rows(entries: Sequence[BenchEntry]) -> list[NightlyRow]:
    rows = []
    for entry in entries:
        changes = []
        for change in (entry.gate or {}).get("metrics", []):
            worse, better = list(change.get("worse", [])), list(change.get("better", []))
            if not worse and not better:
                continue
            changes.append(
                GateChange(
                    metric=str(change["metric"]),
                    before=float(change["before"]),
                    after=float(change["after"]),
                    worse=worse,
                    better=better,
                    p_value=float(min(change.get("p_worse", 1.0), change.get("p_better", 1.0))),
                    regressed=bool(change.get("regressed")),
                )
            )
        rows.append(
            NightlyRow(entry, entry_figure(entry, "agent"), entry_figure(entry, "step"), changes)
        )
    return rows
