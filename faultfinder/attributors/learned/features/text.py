"""What the step features read from one step's text, computed once per step.

Words, numbers, cue phrases (hedging, apologies, verification, termination, criticism),
error signals, progress ledgers and handoff targets, all on case-folded text with cheap
exact pre-checks before any regex, plus how an answer (the ground truth or the run's
final answer) is found in a step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from faultfinder.attributors.heuristics import error_signals, is_acting_step
from faultfinder.attributors.model import Step, StepStatus, Trajectory

__all__ = [
    "AnswerMatcher",
    "StepFacts",
    "apology",
    "code_blocks",
    "extract_final_answer",
    "handoff_target",
    "hedging",
    "normalise_text",
    "numbers_in",
    "step_facts",
    "terminates",
    "verification",
]

# Patterns below run on case-folded text: case-insensitive regexes are several times
# slower in `re`, and long runs carry ~100 kB of text.
# Words are the runs of [a-z0-9] in case-folded text. Mapping every other byte to a
# space and splitting gives exactly `re.findall(r"[a-z0-9]+", text)` (a non-ASCII
# character becomes "?" and then a separator) at a fraction of the regex's cost.
_WORD_BYTES = bytes(c if c in b"0123456789abcdefghijklmnopqrstuvwxyz" else 32 for c in range(256))
# A number not glued to a word or a decimal point:
# `(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])`, written to start with the class [-\d] (the
# lookbehind moved after the first character, the "-" then needing a digit) so that
# `re` skips ahead to the next candidate character instead of trying every position.
_NUMBER = re.compile(r"[-\d](?<![\w.][-\d])(?:(?<=-)\d|(?<!-))[\d,]*(?:\.\d+)?(?!\w)")
_CODE_FENCE = re.compile(r"```")
_HEDGING = re.compile(
    r"\b(?:assum(?:e|ed|ing|ption)|hypothetical(?:ly)?|placeholder|mock(?:ed)?|"
    r"simulat(?:e|ed|ing|ion)|dummy|sample data|example data|for demonstration|"
    r"for illustrative|let'?s suppose|fictional|made[- ]up)\b"
)
_APOLOGY = re.compile(
    r"\b(?:apologi[sz]e|sorry|unfortunately|i (?:cannot|can't|am unable|was unable)|"
    r"i'm unable|not able to access|no (?:results|information) (?:found|available))\b"
)
_VERIFY = re.compile(r"\b(?:verif(?:y|ied|ication)|confirm(?:ed|s)?|double[- ]check)")
_TERMINATE = re.compile(r"\bterminate\b|final answer:")
_FINAL_ANSWER = re.compile(r"FINAL ANSWER:\s*(?P<answer>[^\n]+)", re.IGNORECASE)
# Magentic-One style progress ledger; other frameworks simply never match.
_LEDGER_STALLED = re.compile(
    r'"is_in_loop"\s*:\s*\{[^{}]*"answer"\s*:\s*true'
    r'|"is_progress_being_made"\s*:\s*\{[^{}]*"answer"\s*:\s*false'
)
_LEDGER = re.compile(r'"is_progress_being_made"|"is_in_loop"')
_NEXT_SPEAKER = re.compile(r"^\s*Next speaker\s+(?P<agent>\S+)", re.IGNORECASE)
# A superset of every text pattern of `heuristics.error_signals`, on case-folded text:
# only steps it matches (or that are outputs, or carry an error status) pay for the
# full signal scan. It is the alternation
#   traceback|exit\s*code|error|exception|http(?:/\d(?:\.\d)?)?\s*[45]\d\d
#   |status(?:\s+code)?:?\s*[45]\d\d|fail|not\s+found|unable\s+to|cannot|can't|can not
#   |could not|couldn't
# tested one alternative at a time (it matches when one of them does): the literal ones
# as substrings, the others by regex only when a literal they contain is present.
_MAYBE_ERROR_LITERALS = ("error", "fail", "exception", "traceback", "cannot", "can't",
                         "can not", "could not", "couldn't")  # fmt: skip
_MAYBE_ERROR_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("exit", re.compile(r"exit\s*code")),
    ("http", re.compile(r"http(?:/\d(?:\.\d)?)?\s*[45]\d\d")),
    ("status", re.compile(r"status(?:\s+code)?:?\s*[45]\d\d")),
    ("found", re.compile(r"not\s+found")),
    ("unable", re.compile(r"unable\s+to")),
)
# Cheap exact pre-checks, so that most steps skip the cue regexes (which start with
# `\b` and so are tried at every position). Every alternative of these cues starts and
# ends at a word boundary and a match lies at `[a-z0-9]` run boundaries too, so each
# match contains one of the listed words of the step whole ("did not" the word "did",
# "can't" the word "can", "made-up" the word "made").
_HEDGING_WORDS = frozenset({
    "assume", "assumed", "assuming", "assumption", "hypothetical", "hypothetically",
    "placeholder", "mock", "mocked", "simulate", "simulated", "simulating", "simulation",
    "dummy", "sample", "example", "demonstration", "illustrative", "suppose", "fictional",
    "made",
})  # fmt: skip
_APOLOGY_WORDS = frozenset({"apologise", "apologize", "sorry", "unfortunately", "cannot", "can",
                            "unable", "access", "results", "information"})  # fmt: skip
_CRITICISM_WORDS = frozenset({
    "incorrect", "mistake", "error", "errors", "wrong", "issue", "issues", "inaccurate",
    "inaccuracy", "accurate", "correct", "did", "didn", "does", "doesn", "discrepancy",
    "discrepancies", "overlooked", "missed",
})  # fmt: skip
# Fragments one of which every match contains: a substring test is far cheaper than
# the regex scan, and after the word test it leaves few steps to scan.
_HEDGING_HINTS = ("assum", "hypothetical", "placeholder", "mock", "simulat", "dummy",
                  "sample data", "example data", "for demonstration", "for illustrative",
                  "suppose", "fictional", "made up", "made-up")  # fmt: skip
_APOLOGY_HINTS = ("apologi", "sorry", "unfortunately", "i cannot", "i can't", "i am unable",
                  "i was unable", "i'm unable", "not able to access", "no results",
                  "no information")  # fmt: skip
_CRITICISM_HINTS = ("incorrect", "mistake", "error", "wrong", "issue", "inaccura", "not accurate",
                    "not correct", "did not", "didn't", "does not", "doesn't", "discrepanc",
                    "overlooked", "missed")  # fmt: skip
# Verification and termination cues match inside words too: only fragments apply.
_VERIFY_HINTS = ("verif", "confirm", "double")
_TERMINATE_HINTS = ("terminate", "final answer:")
_CRITICISM = re.compile(
    r"\b(?:incorrect|mistake|errors?|wrong|issues?|inaccura(?:te|cy)|not (?:accurate|correct)|"
    r"did not|didn't|does not|doesn't|discrepanc(?:y|ies)|overlooked|missed)\b"
)
_HANDOFF_NOTE = "handoff_to"

_MIN_TEXT_ANSWER = 3


def _cue(lowered: str, hints: tuple[str, ...], pattern: re.Pattern[str]) -> float:
    if not any(map(lowered.__contains__, hints)):
        return 0.0
    return float(bool(pattern.search(lowered)))


def _word_cue(
    lowered: str,
    words: frozenset[str],
    cue_words: frozenset[str],
    hints: tuple[str, ...],
    pattern: re.Pattern[str],
) -> float:
    if cue_words.isdisjoint(words):
        return 0.0
    return _cue(lowered, hints, pattern)


def _maybe_error(lowered: str) -> bool:
    """Whether case-folded text may show an error signal (see `_MAYBE_ERROR_LITERALS`)."""
    if any(map(lowered.__contains__, _MAYBE_ERROR_LITERALS)):
        return True
    return any(
        hint in lowered and pattern.search(lowered) for hint, pattern in _MAYBE_ERROR_PATTERNS
    )


def _words(lowered: str) -> list[str]:
    """The words of case-folded text, as `re.findall(r"[a-z0-9]+", lowered)` gives them."""
    return lowered.encode("ascii", "replace").translate(_WORD_BYTES).decode("ascii").split()


def normalise_text(text: str) -> str:
    return " ".join(_words(text.casefold()))


def _number_value(token: str) -> float | None:
    try:
        return float(token.replace(",", ""))
    except ValueError:
        return None


def numbers_in(text: str) -> set[float]:
    found: set[float] = set()
    for token in set(_NUMBER.findall(text)):
        value = _number_value(token)
        if value is not None:
            found.add(value)
    return found


def _single_number(text: str) -> float | None:
    """The answer's value when it is a single number (commas, %, $ and a unit aside)."""
    tokens = _NUMBER.findall(text)
    if len(tokens) != 1:
        return None
    rest = _NUMBER.sub(" ", text)
    if len(_words(rest.casefold())) > 2:
        return None
    return _number_value(tokens[0])


@dataclass(frozen=True)
class AnswerMatcher:
    """Whether a text contains an answer: by value when it is a number, else by words."""

    number: float | None
    words: str

    @classmethod
    def of(cls, answer: str | None) -> AnswerMatcher | None:
        if answer is None or not answer.strip():
            return None
        number = _single_number(answer)
        words = normalise_text(answer)
        if number is None and len(words) < _MIN_TEXT_ANSWER:
            return None
        return cls(number, words)

    def found_in(self, numbers: set[float], normalised: str) -> bool:
        if self.number is not None:
            return self.number in numbers
        return f" {self.words} " in f" {normalised} "


@dataclass(frozen=True)
class StepFacts:
    """What the features need from one step's text, computed once."""

    agent: str
    acting: bool
    words: frozenset[str]
    normalised: str
    numbers: set[float]
    error: float
    length: int
    ledger: bool
    stalled: bool
    criticism: float


def step_facts(step: Step, task: str) -> tuple[StepFacts, str]:
    text = step.content
    if step.tool_result and step.tool_result not in text:
        text = f"{text}\n{step.tool_result}"
    lowered = text.casefold()
    acting = is_acting_step(step)
    error = 0.0
    if not acting or step.error or step.status is StepStatus.ERROR or _maybe_error(lowered):
        signals = error_signals(step, task)
        error = signals[0].strength if signals else 0.0
    word_list = _words(lowered)
    normalised = " ".join(word_list)
    words = frozenset(word_list)
    ledger = bool(_LEDGER.search(lowered))
    facts = StepFacts(
        agent=step.agent,
        acting=acting,
        words=words,
        normalised=normalised,
        numbers=numbers_in(text),
        error=error,
        length=len(step.content),
        ledger=ledger,
        stalled=ledger and bool(_LEDGER_STALLED.search(lowered)),
        criticism=_word_cue(lowered, words, _CRITICISM_WORDS, _CRITICISM_HINTS, _CRITICISM)
        if acting
        else 0.0,
    )
    return facts, lowered


def code_blocks(content: str) -> float:
    """The fenced code blocks of a step's content (pairs of ``` fences)."""
    return float(len(_CODE_FENCE.findall(content)) // 2)


def hedging(lowered: str, words: frozenset[str]) -> float:
    """1.0 when case-folded text assumes, simulates or invents data, else 0.0."""
    return _word_cue(lowered, words, _HEDGING_WORDS, _HEDGING_HINTS, _HEDGING)


def apology(lowered: str, words: frozenset[str]) -> float:
    """1.0 when case-folded text apologises or gives up, else 0.0."""
    return _word_cue(lowered, words, _APOLOGY_WORDS, _APOLOGY_HINTS, _APOLOGY)


def verification(lowered: str) -> float:
    """1.0 when case-folded text claims to verify or confirm something, else 0.0."""
    return _cue(lowered, _VERIFY_HINTS, _VERIFY)


def terminates(lowered: str) -> float:
    """1.0 when case-folded text says TERMINATE or gives a final answer, else 0.0."""
    return _cue(lowered, _TERMINATE_HINTS, _TERMINATE)


def handoff_target(step: Step) -> str | None:
    target = step.metadata.get(_HANDOFF_NOTE)
    if isinstance(target, str) and target:
        return target
    match = _NEXT_SPEAKER.match(step.content)
    return str(match["agent"]) if match else None


def extract_final_answer(trajectory: Trajectory) -> str | None:
    """The run's final answer: `trajectory.final_answer`, else the last 'FINAL ANSWER:' line."""
    if trajectory.final_answer and trajectory.final_answer.strip():
        return str(trajectory.final_answer)
    for step in reversed(trajectory.steps):
        matches = _FINAL_ANSWER.findall(step.content)
        if matches:
            return str(matches[-1]).strip()
    return None
