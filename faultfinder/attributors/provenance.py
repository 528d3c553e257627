"""Where a run's values come from: which figures an agent states that nothing it observed
supports.

Observations are what the system was given or told: the task, the user's turns, system
prompts, and every tool's or terminal's report. A figure an agent states (in a message or
in a tool call's arguments) is supported when an earlier observation holds it, or when it
follows from earlier figures by one arithmetic step (a sum, a difference, a product, a
ratio, a percentage) or a common unit conversion. A figure that is neither was made up
or miscalculated: the strongest evidence a step can carry on any framework, since it
needs no knowledge of the framework, only the run's own text.

Everything here reads steps in order and depends only on the steps so far (prefix-safe).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from faultfinder.attributors.model import Step, StepKind
from faultfinder.attributors.values import value_tokens, without_dates, written_before

__all__ = ["Provenance", "ValueFacts", "derivable", "figures_in", "same_figure", "tool_calls"]

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?![\w])")
"""A figure: digits with thousands separators and a decimal part, not the punctuation
after it ("2026," is 2026)."""
_POOL = 40
"""Most recent distinct figures a new figure is checked against for one-step derivations."""
_CHECKED = 12
"""At most this many unsupported figures of one step are checked for derivations."""
_CONVERSIONS = (
    1000.0, 100.0, 60.0, 24.0, 3600.0, 7.0, 12.0, 1.609344, 0.621371, 2.20462, 0.453592,
    3.28084, 0.3048, 2.54, 0.393701, 1.8, 0.001, 0.01, 1e6, 1e9, 365.0, 52.0,
)  # fmt: skip
"""Factors of common unit conversions (thousands, percent, time, length, mass)."""
_MOST_MADE_UP = 3
"""More new unsupported figures than this in one step is a report of something observed
outside the trace (a page read, a file opened), not a handful of made-up claims."""
_CODE_BLOCK = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_OBSERVATION_KINDS = frozenset({StepKind.TOOL, StepKind.HUMAN, StepKind.SYSTEM})


_CALL_LINE = re.compile(r"\s*[\w.]+\(.*\)\s*$")
"""A line that is a function call and nothing else."""


def _value(token: str) -> float | None:
    try:
        return float(token.replace(",", ""))
    except ValueError:
        return None


def figures_in(text: str) -> dict[float, str]:
    """The figures of a text (value → first spelling), without bare single digits, which
    number lists and steps far more often than they state a value, without years
    (1900–2100), which date text far more often than they state a value, and without
    the parts of dates, times and identifiers ("Oct 10, 2024", "02:10", "ORD-104":
    `values.without_dates`), which are not quantities."""
    out: dict[float, str] = {}
    if any(ch.isdigit() for ch in text):
        text = without_dates(text)
    for token in _NUMBER.findall(text):
        value = _value(token)
        if value is None or (abs(value) < 10 and "." not in token):
            continue
        if token.isdigit() and 1900 <= value <= 2100:
            continue
        out.setdefault(value, token)
    return out


def same_figure(a: float, b: float) -> bool:
    """Equal: exactly for two whole numbers, else to 1e-4 relative (a rounding of the
    last digits of a computed decimal)."""
    if a.is_integer() and b.is_integer():
        return a == b
    return abs(a - b) <= max(1e-4 * abs(a), 0.006)


_ROUNDINGS = (2, 1, 0, -1, -2, -3, -4, -5, -6)


def _unary(a: float) -> Iterator[float]:
    """What one figure becomes by a rounding or a common unit conversion."""
    for digits in _ROUNDINGS:
        yield round(a, digits)
    for factor in _CONVERSIONS:
        yield a * factor
        yield a / factor
    yield a * 1.8 + 32
    yield (a - 32) / 1.8


@functools.lru_cache(maxsize=4096)
def _unary_of(a: float) -> tuple[float, ...]:
    """`_unary(a)`, kept: a figure stays in the pool of recent figures for many steps."""
    return tuple(_unary(a))


@functools.lru_cache(maxsize=32)
def _unary_sorted(pool: tuple[float, ...]) -> list[float]:
    """Every `_unary` of `pool`, sorted: a pool is checked against many figures while it
    stays the same, so its derivations are computed once."""
    return sorted(itertools.chain.from_iterable(map(_unary_of, pool)))


def derivable(value: float, pool: list[float]) -> bool:
    """Whether `value` follows from one or two of `pool` by one arithmetic step (a sum, a
    difference, a product, a ratio, a percentage or a percentage change), a rounding or
    a common unit conversion."""
    loose = max(1e-4 * abs(value), 0.006)
    if math.isfinite(value) and all(math.isfinite(a) for a in pool):
        # `same_figure(value, x)` holds only for x within `loose` of value: look there alone.
        unary = _unary_sorted(tuple(pool))
        start = bisect.bisect_left(unary, value - loose)
        stop = bisect.bisect_right(unary, value + loose)
        if any(same_figure(value, derived) for derived in unary[start:stop]):
            return True
    elif any(same_figure(value, derived) for a in pool for derived in _unary(a)):
        return True
    ordered = sorted(pool)
    # Is some value of `ordered` within a tolerance of b? (Written out: this loop runs
    # for every figure a step states.)
    size = len(ordered)
    whole = value.is_integer()
    find = bisect.bisect_left
    for a in pool:
        # value = a + b, a - b or b - a: b within the value's own tolerance (exact for
        # whole numbers, whose sums and differences are exact).
        additive = 0.006 if whole and a.is_integer() else loose
        for b in (value - a, a - value, value + a):
            position = find(ordered, b - additive)
            if position < size and ordered[position] <= b + additive:
                return True
        if not a or not value:
            continue
        # value = a * b, a / b, b / a, 100 a / b or 100 (b - a) / a: b to the relative
        # precision the value is written to (1e-4, or its rounding to two decimals).
        relative = 1e-4 if whole else max(1e-4, 0.0051 / abs(value))
        for b in (value / a, a / value, value * a, 100 * a / value, a * (1 + value / 100)):
            tolerance = max(relative * abs(b), 1e-9)
            position = find(ordered, b - tolerance)
            if position < size and ordered[position] <= b + tolerance:
                return True
    return False


_CALL = re.compile(r"([A-Za-z_][\w.-]*)\((\{.*?\})\)", re.DOTALL)
_NAME_WORD = re.compile(r"[A-Z0-9#][\w#&'.-]*$")


def _naming(value: str) -> bool:
    """Whether an argument value names something (an id, a code, a proper name) rather
    than being free text: no line break, at most 40 characters, and either one token
    with a digit or a capital, or up to four capitalised words."""
    text = value.strip()
    if not 2 <= len(text) <= 40 or "\n" in text:
        return False
    words = text.split()
    if len(words) == 1:
        return any(ch.isdigit() for ch in text) or text[0].isupper()
    return len(words) <= 4 and all(_NAME_WORD.match(word) for word in words)


def _string_values(value: object, key: str = "") -> list[tuple[str, str]]:
    if isinstance(value, str):
        return [(key, value)]
    if isinstance(value, dict):
        return [pair for k, v in value.items() for pair in _string_values(v, str(k))]
    if isinstance(value, list):
        return [pair for item in value for pair in _string_values(item, key)]
    return []


def _parsed_calls(step: Step) -> list[tuple[str, object]]:
    """The tool calls a step shows, with their arguments parsed: its `tool_name` with
    `tool_arguments`, and every `name({...})` in its text (the pattern's search is slow
    on long texts, so it runs only where `({` occurs). Arguments that are not JSON are
    left out."""
    raw: list[tuple[str, str]] = []
    if step.tool_arguments:
        raw.append((step.tool_name or "tool", step.tool_arguments))
    if "({" in step.content:
        raw.extend((m.group(1), m.group(2)) for m in _CALL.finditer(step.content))
    parsed: list[tuple[str, object]] = []
    for tool, text in raw:
        try:
            parsed.append((tool, json.loads(text)))
        except ValueError:
            continue
    return parsed


def tool_calls(step: Step) -> list[tuple[str, str]]:
    """The tool calls a step shows, each as (tool, its arguments as canonical JSON: keys
    sorted, no spaces), in order and without duplicates; arguments that are not a JSON
    object are left out."""
    found: dict[tuple[str, str], None] = {}
    for tool, arguments in _parsed_calls(step):
        if isinstance(arguments, dict):
            found[(tool, json.dumps(arguments, sort_keys=True, separators=(",", ":")))] = None
    return list(found)


def _arguments(step: Step) -> list[tuple[str, str, str]]:
    """The naming argument values of the tool calls a step shows. (tool, argument, value)"""
    found: dict[tuple[str, str, str], None] = {}
    for tool, arguments in _parsed_calls(step):
        for name, value in _string_values(arguments):
            if _naming(value):
                found[(tool, name, value.strip())] = None
    return list(found)


def _named_in(value: str, seen: str, tokens: frozenset[str] | set[str]) -> bool:
    """Whether case-folded text `seen` names `value`: as written, or, for a value that is
    a date, a time or a number (with units), in any spelling of it (`tokens`, the
    `values.value_tokens` of `seen`): "May 26th" names 2024-05-26, "02:10 UTC on
    2026-11-03" names 2026-11-03T02:10Z, "3 pm" names 15:00, "1,200" names 1200."""
    return value.casefold() in seen or written_before(value, tokens)


@dataclass(frozen=True)
class ValueFacts:
    """What one step says about values (empty for observations)."""

    unsupported: tuple[str, ...] = ()
    """Figures the step states that no earlier observation holds or derives, as written."""
    introduced: tuple[str, ...] = ()
    """Of those, the ones no earlier step stated (this step made them up)."""
    answered: str | None = None
    """Whom the step answers, when it states a figure of its own and repeats none of the
    figures it was just given: the tool (or other observer) that reported since the agent
    last acted, else the other agent that spoke just before."""
    answered_figures: tuple[str, ...] = ()
    """Those figures, as written."""
    answered_verb: str = "returned"
    """`returned` (a report) or `said` (another agent's message)."""
    unsupported_arguments: tuple[tuple[str, str, str], ...] = ()
    """Tool-call arguments naming something nothing observed before names: (tool,
    argument, value); only identifiers and proper names, not free text."""
    outside_task: bool = False
    """A tool-call argument names something the task does not."""
    withheld: str | None = None
    """The tool whose figures the step passes on none of: the agent's own tools reported
    figures since it last acted, and it speaks (no tool call) without stating any figure.
    Only the first such step after those reports."""
    withheld_figures: tuple[str, ...] = ()

    @property
    def contradicts(self) -> bool:
        return self.answered is not None


@dataclass
class Provenance:
    """Reads a run step by step and says, for each agent step, which figures it states
    without support (see the module's docstring)."""

    task: str
    _observed: set[float] = field(default_factory=set)
    _claimed: set[float] = field(default_factory=set)
    _unsupported: set[float] = field(default_factory=set)
    """Figures stated without support so far: repeating one is still unsupported."""
    _recent: list[float] = field(default_factory=list)
    _pending: list[tuple[str, dict[float, str]]] = field(default_factory=list)
    """Reports since the last agent step that stated figures: (who reported, its figures)."""
    _own_reports: dict[str, list[tuple[str, dict[float, str]]]] = field(default_factory=dict)
    """Per agent, its tools' reports with figures since it last acted: (tool, figures)."""
    _last_actor: str | None = None
    _said: list[tuple[str, dict[float, str]]] = field(default_factory=list)
    """Every agent step so far: (its agent, its figures)."""
    _observers: set[str] = field(default_factory=set)
    """Agents whose own messages carry what they observe (a web surfer describing a page,
    not a tool's step of its own): one step bringing more than `_MOST_MADE_UP` new
    figures at once marks its agent so, and from then on its steps are observations."""
    _seen_text: list[str] = field(default_factory=list)
    """Case-folded text of every step so far (for argument values): what the task, a
    user or a tool named, and what an agent passed down (a coordinator's instruction, a
    handoff's arguments)."""
    _seen_tokens: set[str] = field(default_factory=set)
    """The dates, times and numbers of `_seen_text[:_tokens_read]` (`values.value_tokens`)."""
    _tokens_read: int = 0

    def __post_init__(self) -> None:
        self._observe(figures_in(self.task))
        self._seen_text.append(self.task.casefold())

    def _observe(self, figures: dict[float, str]) -> None:
        self._observed.update(figures)
        self._remember(figures)

    def _remember(self, figures: dict[float, str]) -> None:
        for value in figures:
            if value in self._recent:
                self._recent.remove(value)
            self._recent.append(value)
        del self._recent[:-_POOL]

    def _unseen_arguments(self, step: Step) -> tuple[tuple[tuple[str, str, str], ...], bool]:
        """The step's naming arguments that nothing observed names, and whether any of
        its naming arguments is absent from the task."""
        arguments = _arguments(step)
        if not arguments:
            return (), False
        seen = "\n".join(self._seen_text)
        task = self._seen_text[0]
        literal = [call for call in arguments if call[2].casefold() in seen]
        if len(literal) < len(arguments):
            for text in self._seen_text[self._tokens_read :]:
                self._seen_tokens.update(value_tokens(text))
            self._tokens_read = len(self._seen_text)
        unseen = tuple(
            call
            for call in arguments
            if call not in literal and not _named_in(call[2], seen, self._seen_tokens)
        )
        task_tokens = value_tokens(task)
        return unseen, any(not _named_in(call[2], task, task_tokens) for call in arguments)

    def _observe_step(self, step: Step) -> ValueFacts:
        """An observation: its figures and text become what later steps may rely on."""
        arguments, outside = (
            self._unseen_arguments(step) if step.kind is StepKind.TOOL else ((), False)
        )
        if step.tool_result:
            self._observe(figures_in(step.tool_result))
            self._seen_text.append(step.tool_result.casefold())
        if step.tool_arguments:
            self._seen_text.append(step.tool_arguments.casefold())
        figures = figures_in(step.content)
        self._observe(figures)
        self._seen_text.append(step.content.casefold())
        self._pending.append((step.tool_name or step.agent, figures))
        if step.tool_name and figures and self._last_actor is not None:
            # A named tool's report answers the agent that acted last (its caller),
            # whatever agent name a framework gives the tool's own step. A shared
            # terminal's output in a group chat (no tool named) is everyone's to read.
            self._own_reports.setdefault(self._last_actor, []).append((step.tool_name, figures))
        return ValueFacts(unsupported_arguments=arguments, outside_task=outside)

    def _withheld(self, step: Step, stated: dict[float, str]) -> tuple[str | None, tuple[str, ...]]:
        """The agent's own tool that reported figures it now passes on none of (it speaks
        without a tool call and without any figure); the reports are spent either way."""
        reports = self._own_reports.pop(step.agent, None)
        if not reports or stated or step.tool_arguments or tool_calls(step):
            return None, ()
        if all(_CALL_LINE.match(line) for line in step.content.strip().splitlines()):
            return None, ()  # a call written as text (`lookup(city='Bergen')`), or nothing
        tool, figures = reports[-1]
        return tool, tuple(figures.values())

    def _unsupported_of(self, stated: dict[float, str]) -> dict[float, str]:
        """The stated figures nothing observed holds or derives (a figure stated without
        support before stays unsupported when repeated)."""
        unsupported: dict[float, str] = {}
        checked = 0
        for value, token in stated.items():
            if value in self._observed:
                continue
            if value not in self._unsupported and checked < _CHECKED:
                checked += 1
                if derivable(value, self._recent):
                    continue
            unsupported[value] = token
        return unsupported

    def _answered(
        self, agent: str, stated: dict[float, str], unsupported: dict[float, str]
    ) -> tuple[str | None, tuple[str, ...], str]:
        """Whom a step with unsupported figures answers while repeating none of the
        figures it was given: (who, their figures, `returned` or `said`)."""
        reports = [(who, figs) for who, figs in self._pending if figs]
        verb = "returned"
        if not reports:
            message = self._message_answered(agent)
            if message is not None:
                reports, verb = [message], "said"
        if unsupported and reports:
            reported = {value for _, figs in reports for value in figs}
            if reported and not reported & set(stated):
                who, figs = reports[-1]
                return who, tuple(figs.values()), verb
        return None, (), verb

    def push(self, step: Step, acting: bool) -> ValueFacts:
        """The next step's value facts (observations carry only their call's arguments)."""
        if step.kind in _OBSERVATION_KINDS or not acting:
            return self._observe_step(step)
        self._last_actor = step.agent
        arguments, outside = self._unseen_arguments(step)
        # What an agent says or passes on (an instruction, a handoff's arguments) names
        # values for the steps after it, as a user's words do.
        self._seen_text.append(step.content.casefold())
        if step.tool_arguments:
            self._seen_text.append(step.tool_arguments.casefold())
        if step.tool_result:
            self._observe(figures_in(step.tool_result))
            self._seen_text.append(step.tool_result.casefold())
        # Code an agent writes holds constants, not claims about the world.
        prose = _CODE_BLOCK.sub(" ", step.content)
        stated = figures_in(" ".join(filter(None, (prose, step.tool_arguments))))
        unsupported = self._unsupported_of(stated)
        introduced = tuple(
            token for value, token in unsupported.items() if value not in self._claimed
        )
        if step.agent in self._observers or len(introduced) > _MOST_MADE_UP:
            # A report of what the agent saw, not a claim: no step of the run shows it.
            self._observers.add(step.agent)
            self._own_reports.pop(step.agent, None)
            self._claimed.update(stated)
            self._observe(stated)
            self._pending.append((step.agent, stated))
            self._said.append((step.agent, stated))
            return ValueFacts(unsupported_arguments=arguments, outside_task=outside)
        answered, answered_figures, verb = self._answered(step.agent, stated, unsupported)
        withheld, withheld_figures = self._withheld(step, stated)
        self._claimed.update(stated)
        self._unsupported.update(unsupported)
        self._remember(stated)
        if stated:
            # Reports stay pending through agent steps that state no figure (a thought,
            # a handoff, a tool call without figures) until one answers them.
            self._pending = []
        self._said.append((step.agent, stated))
        return ValueFacts(
            tuple(unsupported.values()),
            introduced,
            answered,
            answered_figures,
            verb,
            arguments,
            outside,
            withheld,
            withheld_figures,
        )

    def _message_answered(self, agent: str) -> tuple[str, dict[float, str]] | None:
        """The latest message with figures by another agent since `agent` last spoke."""
        for speaker, figures in reversed(self._said):
            if speaker == agent:
                return None
            if figures:
                return speaker, figures
        return None

    def supported(self, value: float) -> bool:
        """Whether `value` is observed so far or follows from the figures so far."""
        return value in self._observed or derivable(value, self._recent)
