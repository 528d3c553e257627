"""Which error signals are errors the run shows, and which of those the run got past.

`heuristics.error_signals` finds every sign of an error in a step's text, words included
(the learned model's features read it that way). Not every such sign is an error of the
run: a tool that returns log lines ("3 failed checkouts"), search results or a fetched
page ("fails to render") reports data that happens to hold the word. What a run shows as
an error is what the call itself says (`shown`):

* the step's status or exception, a traceback, an empty tool result: anywhere;
* in data a tool returned (its result, or the step of a tool, terminal or user), an
  error-shaped result: the error at its top (the first line starts with `Error:`,
  `KeyError:`, `Failed …`, `Upload failed:`, `HTTP/1.1 404`, `exitcode: 1`, …; a
  structured result whose top-level `error` field holds something; a one-line reply
  saying what was not found);
* in an agent's own words, the error-shaped signals wherever they stand (an agent
  quotes the error it got), and the words of failure only where the agent says them of
  its own work ("I could not open the file") or opens a line with them as an error
  message ("Request failed: …").

An error is recovered (`outcomes`) when a later call of the same tool (the same terminal,
or for an agent's own failed step the same agent) succeeds: the run got past it, so it
is not what decided the run. An unrecovered error after which no tool answered without
an error ended the run: the run stopped on it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from faultfinder.attributors.excerpts import quoted
from faultfinder.attributors.model import Step, StepKind, StepStatus
from faultfinder.attributors.provenance import tool_calls

__all__ = ["FAILURE_WORDS", "ErrorOutcome", "Labelled", "error_sentence", "outcomes", "shown"]


class Labelled(Protocol):
    """An error signal: what it is called (`heuristics.ErrorSignal`)."""

    @property
    def label(self) -> str: ...


SignalT = TypeVar("SignalT", bound=Labelled)

_ANYWHERE = frozenset({"step status error", "traceback", "empty tool result"})
"""Signals that are the call's own, wherever they show."""
_SHAPED = frozenset({
    "non-zero exit code", "exception raised", "error message", "error field", "HTTP error status",
})  # fmt: skip
"""Signals of a shape only an error has: in an agent's words, wherever they stand."""
FAILURE_WORDS = frozenset({"exception", "failed", "not found", "unable to", "cannot"})
"""Words of failure: in data, only at the top of the result; in an agent's words, only
said of its own work."""

_TOP = re.compile(
    r"""^\W{0,3}(?:
        [A-Za-z_.]*(?:error|exception)\b
      | fail(?:ed|s|ure)?\b
      | unable\s+to\b | cannot\b | can't\b | could\s+not\b | couldn't\b
      | not\s+found\b | no\s+such\b | permission\s+denied\b | timed\s+out\b
      | exit\s*code:?\s*-?[1-9]
      | (?:HTTP(?:/\d(?:\.\d)?)?|status(?:\s+code)?:?)\s*[45]\d\d\b
      | [45]\d\d\s+(?:client|server)\s+error\b
      | (?:[\w-]+\s+){1,3}(?:failed|failure|error|exception)\s*:
    )""",
    re.IGNORECASE | re.VERBOSE,
)
"""The first line of a result that is an error message (or an HTTP error's status line)."""
_ONE_LINE_MISS = re.compile(r"\b(?:not\s+found|does\s+not\s+exist|no\s+such)\b", re.IGNORECASE)
"""A one-line reply saying a looked-up thing is not there ("Order #W9 not found")."""
_ONE_LINE = 120
_TOP_FIELD = re.compile(r"""^\{\s*["'](?:error|errors|error_message)["']\s*:""", re.IGNORECASE)
"""A Python-literal or truncated structured result that opens on its error field."""
_OWN_FAILURE = re.compile(
    r"\b(?:I|we)\b[^.\n]{0,40}?\b(?:fail(?:ed|s)?|unable\s+to|cannot|can't|could\s+not|"
    r"couldn't|was\s+not\s+able|wasn't\s+able)\b",
    re.IGNORECASE,
)
"""An agent saying it failed at something itself."""
_ERROR_LINE = re.compile(
    r"^\W{0,3}(?:[\w-]+\s+){0,3}(?:fail(?:ed|s|ure)?|error|exception)\s*:",
    re.IGNORECASE | re.MULTILINE,
)
"""A line of an agent's own text that is an error message ("Request failed: …")."""
_ERROR_KEYS = ("error", "errors", "error_message")


def _data(step: Step, acting: bool) -> list[str]:
    """The data a tool (or a user) returned in the step: its result, and its whole text
    when the step is a tool's, terminal's or user's own."""
    texts = [step.tool_result] if step.tool_result else []
    if not acting:
        texts.append(step.content)
    return texts


def _top_error(text: str) -> bool:
    """Whether a result is error-shaped at its top (see the module's docstring)."""
    stripped = text.strip()
    if not stripped:
        return False
    try:
        parsed = json.loads(stripped)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return any(parsed.get(key) not in (None, False, "", [], {}) for key in _ERROR_KEYS)
    first = stripped.splitlines()[0]
    if _TOP.match(first) or _TOP_FIELD.match(first):
        return True
    one_line = "\n" not in stripped and len(stripped) <= _ONE_LINE
    return one_line and bool(_ONE_LINE_MISS.search(first))


def shown(step: Step, signals: Sequence[SignalT], *, acting: bool) -> list[SignalT]:
    """Of a step's error `signals` (strongest first), those that are an error the run
    shows, not words inside data a tool returned (see the module's docstring). `acting`:
    the step is an agent's own turn (`heuristics.is_acting_step`)."""
    if not signals:
        return []
    data_error = any(_top_error(text) for text in _data(step, acting))
    own = step.content if acting else ""
    kept: list[SignalT] = []
    for signal in signals:
        if data_error or signal.label in _ANYWHERE or (acting and _said_itself(signal.label, own)):
            kept.append(signal)
    return kept


def _said_itself(label: str, own: str) -> bool:
    """Whether an agent's own words show the signal: an error-shaped one wherever it
    stands, a word of failure only said of its own work."""
    if label in _SHAPED:
        return bool(_SHAPED_IN_OWN.get(label, _NEVER).search(own))
    return label in FAILURE_WORDS and bool(_OWN_FAILURE.search(own) or _ERROR_LINE.search(own))


_NEVER = re.compile(r"(?!)")
_SHAPED_IN_OWN = {
    "non-zero exit code": re.compile(r"exit\s*code:?\s*-?[1-9]\d*", re.IGNORECASE),
    "exception raised": re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b:"),
    "error message": re.compile(r"\berror:", re.IGNORECASE),
    "error field": re.compile(r"""["'](?:error|errors|error_message)["']\s*:""", re.IGNORECASE),
    "HTTP error status": re.compile(
        r"\b(?:HTTP(?:/\d(?:\.\d)?)?|status(?:\s+code)?:?)\s*[45]\d\d\b"
        r"|\b[45]\d\d\s+(?:Client|Server)\s+Error\b",
        re.IGNORECASE,
    ),
}
"""Where the shaped signal stands in the agent's own text (not only in a result it got)."""


@dataclass(frozen=True)
class ErrorOutcome:
    """What became of an error a step shows."""

    recovered_at: int | None
    """The later step at which the same tool (or agent) succeeded, if one did."""
    ended_run: bool
    """Not recovered, and no tool answered without an error after it: the run stopped
    on it."""

    @property
    def recovered(self) -> bool:
        return self.recovered_at is not None


def _source(step: Step, acting: bool) -> str:
    """Whose call a step is: its tool, else (a terminal's report, an agent's own turn)
    its agent."""
    if step.tool_name:
        return f"tool:{step.tool_name}"
    if not acting and step.kind is StepKind.TOOL:
        return f"tool:{step.agent}"
    return f"agent:{step.agent}"


def _answers(step: Step) -> bool:
    return step.kind is StepKind.TOOL or bool(step.tool_result)


def outcomes(
    steps: Sequence[Step], erring: Sequence[bool], acting: Sequence[bool]
) -> list[ErrorOutcome | None]:
    """For each step that shows an error (`erring`), whether a later success of the same
    tool recovered it and whether the run ended on it; None for the other steps."""
    sources = [_source(step, mine) for step, mine in zip(steps, acting, strict=True)]
    succeeded: dict[str, int] = {}
    answered_later = False
    out: list[ErrorOutcome | None] = [None] * len(steps)
    for i in range(len(steps) - 1, -1, -1):
        step = steps[i]
        if erring[i]:
            recovered = succeeded.get(sources[i])
            out[i] = ErrorOutcome(recovered, recovered is None and not answered_later)
            continue
        if step.status is StepStatus.ERROR:
            continue
        if _answers(step) or (acting[i] and not tool_calls(step) and not step.tool_name):
            succeeded[sources[i]] = i
        if _answers(step):
            answered_later = True
    return out


def error_sentence(
    steps: Sequence[Step], actor: int, shown_at: int, label: str, excerpt: str
) -> str:
    """An error the run shows, in words (without a closing full stop), as both zero-LLM
    methods say it: the agent's own step that shows it, or the tool that reported it at
    `shown_at` right after the agent acted at `actor`; then the words that show it."""
    words = f": {quoted(excerpt)}" if excerpt else ""
    agent = steps[actor].agent
    if shown_at == actor:
        return f"{agent}'s step {actor} shows an error ({label}){words}"
    reporter = steps[shown_at].tool_name or steps[shown_at].agent
    return (
        f"{reporter} reported an error ({label}) at step {shown_at}, right after {agent} acted"
        f" at step {actor}{words}"
    )
