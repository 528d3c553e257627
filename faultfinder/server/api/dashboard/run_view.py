"""What a run page leads with: the verdict of the leading attribution, its evidence as links
to the steps with the supporting phrase marked, and the steps' span waterfall (start
offset, duration, tokens, status)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from faultfinder.attributors.auditor import MODEL_FEATURES, Alarm
from faultfinder.attributors.failure_modes import mode_name
from faultfinder.attributors.model import Attribution, Step, Trajectory

__all__ = [
    "AlarmText",
    "EvidenceLink",
    "Highlight",
    "Verdict",
    "Waterfall",
    "WaterfallRow",
    "alarm_text",
    "evidence_links",
    "highlights",
    "model_features",
    "verdict",
    "waterfall",
]

GUESS = "guess"
EVIDENCE_SHOWN = 6
"""Pieces of evidence the run page lists under its verdict."""
SENTENCE_MAX = 160
"""A supporting phrase is widened to its sentence when the sentence is at most this long."""
_MODEL_NOTES = re.compile(r"\s*\(model: .*\)\s*$", re.DOTALL)
_STEP_PREFIX = re.compile(r"^(?:[Ss]tep \d+(?: \([^)]*\))?: |At step \d+, )")
_QUOTED = re.compile(r"'([^']{2,120})'|\"([^\"]{2,120})\"|“([^”]{2,120})”")
_ASSIGNED = re.compile(r"\b\w+=([^\s,;)]{2,80})")
_FIGURE = re.compile(r"[A-Z]{1,3} ?\d[\d.,]*|[$€£]?\d[\d.,]*\d|\b\d{2,}\b")


@dataclass(frozen=True)
class Verdict:
    """The one line a run page leads with: who, where and why, and on what it rests."""

    agent: str
    step: int
    method: str
    text: str
    mode: str | None
    basis: str | None
    """The evidence family, "guess", or None when the method does not say."""
    model_features: tuple[str, ...] = ()
    """What the method's model weighed, in its own terms (`model_features`): shown behind
    a toggle, never in the line itself."""
    step_agent: str | None = None
    """The blamed step's own agent when the answer names another (an LLM that named the
    coder while the step is the terminal's report)."""

    @property
    def mode_name(self) -> str:
        return mode_name(self.mode)

    @property
    def is_guess(self) -> bool:
        return self.basis == GUESS


def _why(attribution: Attribution) -> list[str]:
    why = attribution.details.get("why")
    return [text for text in why if isinstance(text, str) and text] if isinstance(why, list) else []


def verdict(attribution: Attribution | None) -> Verdict | None:
    """The leading attribution as one line: its first piece of evidence, else its reason
    without the model's feature notes."""
    if attribution is None or attribution.agent is None or attribution.step is None:
        return None
    why = _why(attribution)
    text = why[0] if why else _STEP_PREFIX.sub("", _MODEL_NOTES.sub("", attribution.reason))
    basis = attribution.basis
    if basis is None and attribution.details.get("guess") is True:
        basis = GUESS
    return Verdict(
        agent=attribution.agent,
        step=attribution.step,
        method=attribution.method,
        text=text or "no reason given",
        mode=attribution.mode,
        basis=basis,
        model_features=tuple(model_features(attribution)),
        step_agent=_text(attribution.details.get("step_agent")),
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def model_features(attribution: Attribution) -> list[str]:
    """The features an attribution's model weighed for the blamed step (`details`
    `model_features`; answers stored before it was named keep them as `evidence`)."""
    details = attribution.details
    found = details.get("model_features", details.get("evidence"))
    if not isinstance(found, list):
        return []
    texts = [item.get("text") if isinstance(item, Mapping) else None for item in found]
    return [text for text in texts if isinstance(text, str) and text]


@dataclass(frozen=True)
class AlarmText:
    """An early alarm's reason as the run page shows it: what a person reads, and the
    model's features behind a toggle."""

    lead: str
    model_features: tuple[str, ...]


def alarm_text(alarm: Alarm | None) -> AlarmText | None:
    """The alarm's reason split at the model's features (`auditor.MODEL_FEATURES`)."""
    if alarm is None:
        return None
    lead, _, features = alarm.reason.partition(MODEL_FEATURES)
    listed = tuple(text.strip() for text in features.rstrip(".").split("; ") if text.strip())
    return AlarmText(lead.strip(), listed)


@dataclass(frozen=True)
class EvidenceLink:
    """One piece of evidence and the step it is about."""

    step: int
    agent: str
    text: str


def evidence_links(attribution: Attribution | None, trajectory: Trajectory) -> list[EvidenceLink]:
    """The leading attribution's evidence, the blamed step's first, then its other
    candidates' (a candidate ranked by the model's score alone is no evidence)."""
    if attribution is None or attribution.step is None:
        return []
    steps = trajectory.steps
    found: list[EvidenceLink] = []
    seen: set[tuple[int, str]] = set()

    def add(step: int, text: str) -> None:
        if 0 <= step < len(steps) and (step, text) not in seen:
            seen.add((step, text))
            found.append(EvidenceLink(step, steps[step].agent, text))

    for text in _why(attribution):
        add(attribution.step, text)
    for candidate in attribution.candidates:
        if candidate.evidence and not candidate.evidence.startswith("model score"):
            for text in candidate.evidence.split("; "):
                add(candidate.step, text)
    if not found and attribution.reason:
        add(attribution.step, _STEP_PREFIX.sub("", _MODEL_NOTES.sub("", attribution.reason)))
    return found[:EVIDENCE_SHOWN]


@dataclass(frozen=True)
class Highlight:
    """A step's text split around its supporting phrase: `before`, `phrase`, `after`."""

    field: str
    """`content`, `tool_arguments` or `tool_result`."""
    before: str
    phrase: str
    after: str


def _phrases(text: str) -> list[str]:
    """What an evidence sentence quotes or cites, longest first within each kind."""
    quoted = [
        next(group for group in match.groups() if group).strip("… ")
        for match in _QUOTED.finditer(text)
    ]
    quoted = [phrase for phrase in quoted if len(phrase) >= 2]
    assigned = [match.group(1).strip("'\"") for match in _ASSIGNED.finditer(text)]
    figures = [match.group().strip() for match in _FIGURE.finditer(text)]
    return [
        *sorted(quoted, key=len, reverse=True),
        *assigned,
        *sorted(figures, key=len, reverse=True),
    ]


def _sentence(text: str, start: int, end: int) -> tuple[int, int]:
    """The sentence (or line) around `text[start:end]`, if short enough, else the span."""
    left = max(text.rfind(mark, 0, start) for mark in (". ", "\n", "! ", "? "))
    left = 0 if left < 0 else left + 1
    while left < start and text[left].isspace():
        left += 1
    ends = [i for i in (text.find(mark, end) for mark in (". ", "\n", "! ", "? ")) if i >= 0]
    right = min(ends) + 1 if ends else len(text)
    if text[right - 1 : right] == "\n":
        right -= 1
    return (left, right) if right - left <= SENTENCE_MAX else (start, end)


def _locate(step: Step, phrases: Iterable[str]) -> Highlight | None:
    texts = [
        (name, value)
        for name, value in (
            ("content", step.content),
            ("tool_arguments", step.tool_arguments),
            ("tool_result", step.tool_result),
        )
        if value
    ]
    for phrase in phrases:
        for name, text in texts:
            at = text.casefold().find(phrase.casefold())
            if at >= 0:
                start, end = _sentence(text, at, at + len(phrase))
                return Highlight(name, text[:start], text[start:end], text[end:])
    return None


def highlights(links: Sequence[EvidenceLink], trajectory: Trajectory) -> dict[int, Highlight]:
    """Per step, the phrase its evidence cites, found in its text (at most one a step)."""
    by_step: dict[int, list[str]] = {}
    for link in links:
        by_step.setdefault(link.step, []).extend(_phrases(link.text))
    marked = {}
    for index, phrases in by_step.items():
        found = _locate(trajectory.steps[index], phrases)
        if found is not None:
            marked[index] = found
    return marked


@dataclass(frozen=True)
class WaterfallRow:
    step: Step
    offset_s: float
    duration_s: float
    left: float
    """The bar's start, in % of the run's span."""
    width: float
    input_tokens: int | None
    output_tokens: int | None

    @property
    def tokens(self) -> int | None:
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)


@dataclass
class Waterfall:
    total_s: float
    rows: list[WaterfallRow] = field(default_factory=list)
    untimed: int = 0
    """Steps without start and end times (not drawn)."""

    @property
    def tokens(self) -> int:
        return sum(row.tokens or 0 for row in self.rows)

    @property
    def by_index(self) -> dict[int, WaterfallRow]:
        return {row.step.index: row for row in self.rows}


def _count(metadata: Mapping[str, object], name: str) -> int | None:
    value = metadata.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def waterfall(steps: Sequence[Step]) -> Waterfall:
    """The timed steps as bars on the run's time axis (the earliest start to the latest
    end of `steps`)."""
    timed = [s for s in steps if s.start_time is not None and s.end_time is not None]
    if not timed:
        return Waterfall(0.0, untimed=len(steps))
    origin = min(s.start_time for s in timed if s.start_time is not None)
    finish = max(s.end_time for s in timed if s.end_time is not None)
    total = max((finish - origin).total_seconds(), 1e-6)
    chart = Waterfall(total, untimed=len(steps) - len(timed))
    for step in timed:
        assert step.start_time is not None and step.end_time is not None
        offset = (step.start_time - origin).total_seconds()
        duration = max((step.end_time - step.start_time).total_seconds(), 0.0)
        # An instant step (a message) still gets a visible tick, inside the track.
        width = max(100 * duration / total, 1.0)
        chart.rows.append(
            WaterfallRow(
                step=step,
                offset_s=offset,
                duration_s=duration,
                left=min(100 * offset / total, 100 - width),
                width=width,
                input_tokens=_count(step.metadata, "input_tokens"),
                output_tokens=_count(step.metadata, "output_tokens"),
            )
        )
    return chart
