"""What the dashboard's pages show, computed from the API's models: rows of the runs list,
the steps of a run page with the attributors' marks, search, attributor agreement and the
overview's charts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import combinations
from typing import Any

from faultfinder.attributors.failure_modes import mode_name
from faultfinder.attributors.model import (
    Attribution,
    AttributionStatus,
    Step,
    Trajectory,
    normalise_agent,
)
from faultfinder.server.api.dashboard.render import PALETTE, agent_colour, format_time
from faultfinder.server.api.dashboard.run_view import Highlight, evidence_links, highlights
from faultfinder.server.runs import (
    UNKNOWN_MODE,
    CulpritFilter,
    RunService,
    leading_attribution,
)
from faultfinder.server.schemas import BlameBucket, LabelOut, RunPage, RunSummary, Stats

SEARCH_PAGE = 200
SEARCH_SCAN_LIMIT = 2000
"""Text search reads at most this many runs per page of results."""
PREVIEW_CHARS = 160
CANDIDATE_MARKS = 5
"""Candidate steps of one attribution marked on the timeline (the highest scores)."""
LONG_CONTENT_CHARS = 400


def primary_attribution(
    attributions: Sequence[Attribution], preferred: Sequence[str]
) -> Attribution | None:
    """The answer the dashboard leads with (`leading_attribution`)."""
    return leading_attribution(attributions, preferred)


@dataclass
class RunRowView:
    run: RunSummary
    culprit: Attribution | None

    @property
    def duration(self) -> float | None:
        started: float | None = self.run.started_at
        ended: float | None = self.run.ended_at
        return None if started is None or ended is None else ended - started


@dataclass
class StepMark:
    kind: str
    """culprit, blamed, candidate, label, reference, in-set."""
    text: str


@dataclass
class StepView:
    step: Step
    marks: list[StepMark] = field(default_factory=list)
    culprit: bool = False
    in_prediction_set: bool = False
    highlight: Highlight | None = None
    """The phrase the leading attribution's evidence cites in this step, if any."""

    @property
    def preview(self) -> str:
        text = " ".join(self.step.content.split())
        return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"

    @property
    def is_long(self) -> bool:
        return len(self.step.content) > LONG_CONTENT_CHARS or self.step.content.count("\n") > 8


def step_views(
    trajectory: Trajectory,
    latest: Sequence[Attribution],
    primary: Attribution | None,
    labels: Sequence[LabelOut],
) -> list[StepView]:
    """The run page's steps with their marks: the primary's culprit (and prediction set),
    the other attributors' answers and strongest candidates, then the labels."""
    views = [StepView(step) for step in trajectory.steps]
    for index, found in highlights(evidence_links(primary, trajectory), trajectory).items():
        views[index].highlight = found
    if primary is not None:
        _mark_primary(views, primary)
    _mark_attributions(views, latest, primary)
    _mark_labels(views, trajectory, labels)
    return views


STEPS_PER_PAGE = 250
"""Steps the run page shows at once: a long run's page stays quick to serve and render."""


@dataclass(frozen=True)
class StepWindow:
    """The steps one run page shows: `[start, stop)` of `total`."""

    start: int
    stop: int
    total: int

    @classmethod
    def around(cls, total: int, requested: int | None, focus: int | None) -> StepWindow:
        """The page starting at `requested` (rounded down to a page), or else the page
        holding `focus` (the blamed step), or else the first."""
        anchor = requested if requested is not None else focus if focus is not None else 0
        anchor = min(max(anchor, 0), max(total - 1, 0))
        start = anchor - anchor % STEPS_PER_PAGE
        return cls(start, min(start + STEPS_PER_PAGE, total), total)

    @property
    def previous(self) -> int | None:
        return self.start - STEPS_PER_PAGE if self.start > 0 else None

    @property
    def next(self) -> int | None:
        return self.stop if self.stop < self.total else None

    def href(self, step: int) -> str:
        """A link to step `step`: on this page its anchor, else its page's."""
        if self.start <= step < self.stop:
            return f"#step-{step}"
        return f"?steps_from={step - step % STEPS_PER_PAGE}#step-{step}"


def _mark(views: list[StepView], index: int | None, kind: str, text: str) -> None:
    if index is not None and 0 <= index < len(views):
        views[index].marks.append(StepMark(kind, text))


def _mark_primary(views: list[StepView], primary: Attribution) -> None:
    if primary.step is None or primary.step >= len(views):
        return
    views[primary.step].culprit = True
    _mark(views, primary.step, "culprit", f"culprit · {primary.method}")
    if primary.prediction_set is not None:
        lo, hi = primary.prediction_set.lo, primary.prediction_set.hi
        for view in views[lo : hi + 1]:
            view.in_prediction_set = True


def _mark_attributions(
    views: list[StepView], latest: Sequence[Attribution], primary: Attribution | None
) -> None:
    for attribution in latest:
        if attribution is primary or attribution.status is not AttributionStatus.OK:
            continue
        _mark(views, attribution.step, "blamed", f"blamed · {attribution.method}")
    for attribution in latest:
        strongest = sorted(attribution.candidates, key=lambda c: -c.score)[:CANDIDATE_MARKS]
        for candidate in strongest:
            if candidate.step != attribution.step:
                text = f"{attribution.method} {candidate.score:.2f}"
                _mark(views, candidate.step, "candidate", text)


def _mark_labels(views: list[StepView], trajectory: Trajectory, labels: Sequence[LabelOut]) -> None:
    if labels:
        label = labels[-1]
        _mark(views, label.step, "label", f"human label · {label.agent}")
    reference = trajectory.metadata.get("label")
    if isinstance(reference, Mapping) and isinstance(reference.get("step"), int):
        text = f"reference label · {reference.get('agent')}"
        _mark(views, int(reference["step"]), "reference", text)


def latest_per_method(
    attributions: Sequence[Attribution], primary: Attribution | None
) -> list[Attribution]:
    """Each method's newest answer, the primary's method first."""
    newest: dict[str, Attribution] = {}
    for attribution in attributions:
        newest[attribution.method] = attribution
    ordered = sorted(newest.values(), key=lambda a: a.method)
    if primary is not None:
        ordered.sort(key=lambda a: a.method != primary.method)
    return ordered


def run_matches(run: RunSummary, needle: str) -> bool:
    """Text search over what the runs list shows (id, project, agents, answers)."""
    haystack: list[str] = [
        run.id,
        run.project,
        run.outcome or "",
        run.outcome_reason or "",
        run.task or "",
        *run.agents,
    ]
    for attribution in run.attributions:
        haystack += [
            attribution.method,
            attribution.agent or "",
            attribution.reason,
            attribution.error_category or "",
            attribution.mode or "",
            attribution.failure_reason or "",
        ]
    return any(needle in text.casefold() for text in haystack)


async def find_runs(
    service: RunService,
    *,
    query: str | None,
    status: str | None,
    project: str | None,
    agent: str | None,
    mode: str | None = None,
    leading: Sequence[str] = (),
    limit: int,
    cursor: str | None,
) -> tuple[RunPage, int | None]:
    """A page of runs; with a text `query`, the matches among up to SEARCH_SCAN_LIMIT runs
    (and how many runs were read). `agent` and `mode` match the leading attribution."""
    culprit = CulpritFilter(agent=agent, mode=mode, preferred=tuple(leading))
    filters: dict[str, Any] = {"status": status, "project": project, "culprit": culprit}
    if not query:
        return await service.list_runs(**filters, limit=limit, cursor=cursor), None
    needle = query.casefold()
    found: list[RunSummary] = []
    scanned = 0
    next_cursor = cursor
    while True:
        page = await service.list_runs(**filters, limit=SEARCH_PAGE, cursor=next_cursor)
        found += [run for run in page.items if run_matches(run, needle)]
        scanned += len(page.items)
        next_cursor = page.next_cursor
        if next_cursor is None or len(found) >= limit or scanned >= SEARCH_SCAN_LIMIT:
            return RunPage(items=found, next_cursor=next_cursor), scanned


@dataclass(frozen=True)
class Agreement:
    first: str
    second: str
    runs: int
    agent: float
    step: float


def attributor_agreement(rows: Iterable[tuple[str, str, str, int, int]]) -> list[Agreement]:
    """How often two attributors name the same agent / step on runs both answered
    (each method's newest answer per run counts)."""
    answers: dict[str, dict[str, tuple[str, int]]] = defaultdict(dict)
    for run_id, method, agent, step, _created in rows:
        answers[run_id][method] = (normalise_agent(agent), step)
    pairs: dict[tuple[str, str], list[tuple[bool, bool]]] = defaultdict(list)
    for by_method in answers.values():
        for first, second in combinations(sorted(by_method), 2):
            (agent_a, step_a), (agent_b, step_b) = by_method[first], by_method[second]
            pairs[(first, second)].append((agent_a == agent_b, step_a == step_b))
    return [
        Agreement(
            first,
            second,
            len(marks),
            sum(a for a, _ in marks) / len(marks),
            sum(s for _, s in marks) / len(marks),
        )
        for (first, second), marks in sorted(pairs.items())
    ]


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    colour: str
    title: str


@dataclass
class Chart:
    width: int
    height: int
    bars: list[Bar] = field(default_factory=list)
    labels: list[tuple[float, float, str, str]] = field(default_factory=list)
    """(x, y, anchor, text) of axis and bar labels."""
    legend: list[tuple[str, str]] = field(default_factory=list)
    """(colour, name) pairs."""


def mode_label(mode: str) -> str:
    """`R.1` → "R.1 Hallucination"; `unknown` → "no mode (a guess)"."""
    if mode == UNKNOWN_MODE:
        return "no mode (a guess)"
    name = mode_name(mode)
    return f"{mode} {name}" if name else mode


def mode_colours(modes: Iterable[str]) -> dict[str, str]:
    """A colour per failure mode of the overview (grey for `unknown`)."""
    known = sorted(mode for mode in set(modes) if mode != UNKNOWN_MODE)
    colours = {mode: PALETTE[i % (len(PALETTE) - 1)] for i, mode in enumerate(known)}
    colours[UNKNOWN_MODE] = PALETTE[-1]
    return colours


def bar_chart(
    counts: Mapping[str, int], colours: Mapping[str, str], label: Callable[[str], str] = str
) -> Chart:
    """Horizontal bars: failed runs per name (an agent, a mode), the top 12."""
    top = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:12]
    row, left, width = 26, 200, 640
    chart = Chart(width=width, height=max(row * len(top) + 10, 40))
    most = max((count for _, count in top), default=1)
    for position, (name, count) in enumerate(top):
        y = 5 + position * row
        length = (width - left - 60) * count / most
        colour = colours.get(name) or agent_colour(name)
        text = label(name)
        chart.bars.append(Bar(left, y, length, row - 8, colour, f"{text}: {count} runs"))
        short = text if len(text) <= 28 else text[:27] + "…"
        chart.labels.append((left - 8, y + row / 2, "end", short))
        chart.labels.append((left + length + 6, y + row / 2, "start", str(count)))
    return chart


def blame_chart(blame: Mapping[str, int], colours: Mapping[str, str] | None = None) -> Chart:
    """Failed runs blamed on each agent (top 12)."""
    return bar_chart(blame, colours or {})


def over_time_chart(
    buckets: Sequence[BlameBucket],
    bucket: int,
    window_s: int,
    now: float,
    colours: Mapping[str, str],
    label: Callable[[str], str] = str,
) -> Chart:
    """Stacked columns: failed runs per name (an agent, a mode) in each time bucket."""
    width, height, left, bottom = 720, 220, 40, 30
    chart = Chart(width=width, height=height)
    first = int((now - window_s) // bucket * bucket)
    starts = list(range(first, int(now) + 1, bucket))
    counts = {int(b.start): b.counts for b in buckets}
    totals = [sum(counts.get(start, {}).values()) for start in starts]
    most = max(totals, default=0) or 1
    slot = (width - left - 10) / max(len(starts), 1)
    names: set[str] = set()
    for index, start in enumerate(starts):
        y = float(height - bottom)
        for name, count in sorted(counts.get(start, {}).items()):
            names.add(name)
            size = (height - bottom - 10) * count / most
            y -= size
            colour = colours.get(name) or agent_colour(name)
            title = f"{format_time(start)}: {label(name)} {count}"
            chart.bars.append(
                Bar(left + index * slot + 1, y, max(slot - 2, 1), size, colour, title)
            )
    chart.labels.append((left - 6, 14, "end", str(most)))
    chart.labels.append((left - 6, height - bottom, "end", "0"))
    for index in (0, len(starts) // 2, len(starts) - 1) if starts else ():
        stamp = datetime.fromtimestamp(starts[index], UTC)
        text = stamp.strftime("%H:%M" if window_s <= 86400 else "%m-%d")
        chart.labels.append((left + index * slot + slot / 2, height - 10, "middle", text))
    chart.legend = [
        (colours.get(name) or agent_colour(name), label(name)) for name in sorted(names)
    ]
    return chart


def blame_over_time_chart(
    stats: Stats, window_s: int, now: float, colours: Mapping[str, str] | None = None
) -> Chart:
    """Failed runs per blamed agent in each time bucket of the window."""
    return over_time_chart(
        stats.blame_over_time, stats.bucket_seconds, window_s, now, colours or {}
    )
