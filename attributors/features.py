"""Per-step features of a trajectory for the learned step scorer and the online auditor.

Pure and fast (one pass, regexes and token sets): `step_features` turns a trajectory
into one numeric row per step, in the order of `FEATURES` (or `PREFIX_FEATURES`): what
the step shows itself (`STEP_FEATURES`), then, for each of those, its highest value at
the steps before it and at the steps after it (`CONTEXT_FEATURES`), which let a model
compare a step with the rest of its run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from faultfinder.attributors.heuristics import error_signals, is_acting_step
from faultfinder.attributors.model import Step, StepKind, StepStatus, Trajectory

__all__ = [
    "CONTEXT_FEATURES",
    "CONTEXT_FLAG_NEGATIONS",
    "FEATURES",
    "FEATURE_LABELS",
    "PREFIX_FEATURES",
    "STEP_FEATURES",
    "Feature",
    "PrefixScanner",
    "extract_final_answer",
    "feature_names",
    "step_features",
]


@dataclass(frozen=True)
class Feature:
    """One column of the feature matrix."""

    name: str
    doc: str
    prefix_safe: bool
    """True when the value for step i depends only on steps 0..i (and the task and
    ground truth), so that the online auditor may use it while the run streams in."""


STEP_FEATURES: tuple[Feature, ...] = (
    Feature("position", "0-based index of the step.", True),
    Feature("log_position", "log(1 + index).", True),
    Feature("relative_position", "index / (n - 1); 0 for a one-step run.", False),
    Feature("log_steps_total", "log(1 + number of steps in the run).", False),
    Feature("log_steps_to_end", "log(1 + steps after this one).", False),
    Feature(
        "is_acting", "An agent decided this step (message/llm/handoff of a non-tool agent).", True
    ),
    Feature("kind_message", "Step kind is message.", True),
    Feature("kind_tool", "Step kind is tool (tool or terminal output).", True),
    Feature("kind_handoff", "Step kind is handoff, or the step names the next speaker.", True),
    Feature("kind_human", "Step kind is human.", True),
    Feature("kind_other", "Step kind is llm or system.", True),
    Feature("acting_rank", "Acting steps before this one.", True),
    Feature("is_first_acting", "This is the run's first acting step.", True),
    Feature("agent_turn", "Earlier steps by the same agent.", True),
    Feature("agent_first_turn", "No earlier step by the same agent.", True),
    Feature("agent_last_turn", "No later step by the same agent.", False),
    Feature("agents_before", "Distinct agents seen before this step.", True),
    Feature("agent_is_first_speaker", "Same agent as the run's first acting step.", True),
    Feature("error_in_step", "Strongest error signal in the step (0 when none).", True),
    Feature(
        "error_in_previous", "Strongest error signal in the step just before (the input).", True
    ),
    Feature(
        "error_after",
        "Strongest error signal in the tool/terminal/human outputs that follow the step "
        "until the next acting step (the results this step is answerable for).",
        False,
    ),
    Feature(
        "first_error_blame",
        "The step is the one the first-error rule blames: the acting step answerable "
        "for the run's first error signal.",
        False,
    ),
    Feature("errors_before", "log(1 + earlier steps that show an error signal).", True),
    Feature("first_error_here", "The step shows an error signal and no earlier step does.", True),
    Feature(
        "repetition",
        "Highest token-set Jaccard similarity to one of the agent's last 5 earlier steps.",
        True,
    ),
    Feature(
        "loop_count",
        "log(1 + of the agent's last 20 earlier steps, those with Jaccard similarity >= 0.8).",
        True,
    ),
    Feature("log_length", "log(1 + characters of content).", True),
    Feature(
        "length_vs_agent",
        "log of content length over the mean length of the agent's earlier steps (0 if none).",
        True,
    ),
    Feature("code_blocks", "Number of fenced code blocks in the step.", True),
    Feature("task_overlap", "Share of the task's distinct words that occur in the step.", True),
    Feature(
        "new_numbers",
        "log(1 + numbers in the step that neither the task nor an earlier step contains).",
        True,
    ),
    Feature(
        "new_words",
        "Share of the step's distinct words that neither the task nor an earlier step contains.",
        True,
    ),
    Feature(
        "hedging",
        "The step assumes, simulates or invents data (assume, hypothetical, placeholder, "
        "mock, sample data, for demonstration…).",
        True,
    ),
    Feature("apology", "The step apologises or gives up (sorry, unfortunately, I cannot…).", True),
    Feature("verification", "The step claims to verify or confirm something.", True),
    Feature("terminates", "The step contains TERMINATE or a final answer marker.", True),
    Feature(
        "ledger_stalled_before",
        "The latest progress ledger before the step says the run is in a loop or not "
        "making progress.",
        True,
    ),
    Feature(
        "ledger_stalled_after",
        "The first progress ledger after the step (before the agent speaks again) says the "
        "run is in a loop or not making progress.",
        False,
    ),
    Feature(
        "answers_handoff",
        "The previous handoff named this step's agent as the next speaker.",
        True,
    ),
    Feature(
        "instruction_overlap",
        "Share of the words of the latest handoff (instruction) to this agent that the step "
        "repeats; 0 when no handoff named the agent.",
        True,
    ),
    Feature(
        "criticised_next",
        "The next acting step by another agent criticises (incorrect, mistake, error, wrong, "
        "issue, not accurate, did not…).",
        False,
    ),
    Feature(
        "gt_mentioned",
        "The step contains the ground-truth answer (0 without ground truth).",
        True,
    ),
    Feature(
        "gt_mentioned_before",
        "An earlier step contains the ground-truth answer (0 without ground truth).",
        True,
    ),
    Feature(
        "numbers_contradict_gt",
        "The ground truth is a number and the step states numbers none of which equal it "
        "(numbers quoted from the task excluded; 0 without ground truth).",
        True,
    ),
    Feature(
        "first_numbers_contradict_gt",
        "numbers_contradict_gt holds here and at no earlier step.",
        True,
    ),
    Feature(
        "contradiction_after",
        "numbers_contradict_gt holds in a tool/terminal/human output this step is answerable "
        "for (0 without ground truth).",
        False,
    ),
    Feature(
        "agent_directs",
        "The step's agent has handed off to another agent at this step or earlier.",
        True,
    ),
    Feature(
        "final_answer_first_mention",
        "The step is the first to contain the run's final answer (trajectory.final_answer or "
        "the last 'FINAL ANSWER:' line), and that answer differs from the ground truth "
        "when ground truth is allowed.",
        False,
    ),
    Feature("agent_share", "Share of the run's steps taken by the step's agent.", False),
    Feature(
        "agent_error_share",
        "Share of the run's error-showing steps that the step's agent is answerable for.",
        False,
    ),
    Feature("agent_acting_turns", "log(1 + acting steps of the step's agent in the run).", False),
)

"""What each step shows by itself and about its place in the run."""

_BEFORE = "_max_before"
_AFTER = "_max_after"

CONTEXT_FEATURES: tuple[Feature, ...] = tuple(
    Feature(
        f"{f.name}{_BEFORE}",
        f"Highest `{f.name}` among the steps before this one (0 at the first step).",
        f.prefix_safe,
    )
    for f in STEP_FEATURES
) + tuple(
    Feature(
        f"{f.name}{_AFTER}",
        f"Highest `{f.name}` among the steps after this one (0 at the last step).",
        False,
    )
    for f in STEP_FEATURES
)
"""Each step feature's highest value before and after the step. A linear scorer sees
only one step's row at a time; these columns let it weigh, say, an error signal here
against a stronger one earlier in the run."""

FEATURES: tuple[Feature, ...] = STEP_FEATURES + CONTEXT_FEATURES

PREFIX_FEATURES: tuple[Feature, ...] = tuple(f for f in FEATURES if f.prefix_safe)

FEATURE_LABELS: dict[str, tuple[str, str]] = {
    "position": ("step number", "int"),
    "log_position": ("step number", "log1p"),
    "relative_position": ("how far into the run", "share"),
    "log_steps_total": ("steps in the run", "log1p"),
    "log_steps_to_end": ("steps after it", "log1p"),
    "is_acting": ("an agent's own decision", "flag"),
    "kind_message": ("a message", "flag"),
    "kind_tool": ("a tool's or terminal's output", "flag"),
    "kind_handoff": ("a handoff to another agent", "flag"),
    "kind_human": ("the task giver's turn", "flag"),
    "kind_other": ("an LLM call or system step", "flag"),
    "acting_rank": ("agent decisions before it", "int"),
    "is_first_acting": ("the run's first agent decision", "flag"),
    "agent_turn": ("earlier steps by the same agent", "int"),
    "agent_first_turn": ("the agent's first turn", "flag"),
    "agent_last_turn": ("the agent's last turn", "flag"),
    "agents_before": ("agents seen before it", "int"),
    "agent_is_first_speaker": ("by the run's first speaker", "flag"),
    "error_in_step": ("error signal in the step", "strength"),
    "error_in_previous": ("error signal in the step before", "strength"),
    "error_after": ("error signal in the outputs it answers for", "strength"),
    "first_error_blame": ("the step first_error blames", "flag"),
    "errors_before": ("earlier steps showing an error", "log1p"),
    "first_error_here": ("the run's first error signal", "flag"),
    "repetition": ("similarity to the agent's recent steps", "share"),
    "loop_count": ("near-repeats among the agent's recent steps", "log1p"),
    "log_length": ("characters", "log1p"),
    "length_vs_agent": ("length against the agent's earlier steps", "ratio"),
    "code_blocks": ("code blocks", "int"),
    "task_overlap": ("share of the task's words it uses", "share"),
    "new_numbers": ("numbers not seen earlier in the run", "log1p"),
    "new_words": ("share of words not seen earlier", "share"),
    "hedging": ("assumes, simulates or invents data", "flag"),
    "apology": ("apologises or gives up", "flag"),
    "verification": ("claims to verify or confirm", "flag"),
    "terminates": ("ends the run or gives a final answer", "flag"),
    "ledger_stalled_before": ("a progress ledger before it reports a stall", "flag"),
    "ledger_stalled_after": ("the progress ledger after it reports a stall", "flag"),
    "answers_handoff": ("answers a handoff addressed to its agent", "flag"),
    "instruction_overlap": ("share of its instruction it repeats", "share"),
    "criticised_next": ("criticised by the next agent", "flag"),
    "gt_mentioned": ("contains the correct answer", "flag"),
    "gt_mentioned_before": ("the correct answer appeared earlier", "flag"),
    "numbers_contradict_gt": ("states numbers that contradict the correct answer", "flag"),
    "first_numbers_contradict_gt": (
        "first step whose numbers contradict the correct answer",
        "flag",
    ),
    "contradiction_after": ("an output it answers for contradicts the correct answer", "flag"),
    "agent_directs": ("its agent directs others", "flag"),
    "final_answer_first_mention": ("first mention of the wrong final answer", "flag"),
    "agent_share": ("its agent's share of the steps", "share"),
    "agent_error_share": ("its agent's share of the errors", "share"),
    "agent_acting_turns": ("its agent's decisions in the run", "log1p"),
}
"""Each feature as a reader sees it: a short phrase and how its value is shown (`flag`:
yes/no; `int`; `log1p`: a count stored as log(1 + n); `share`: a percentage;
`strength`: an error-signal strength 0–1; `ratio`: a ratio stored as its log). A context
column reads as its step feature's phrase at an earlier or a later step: a flag's as
"at an earlier step: …" (see `CONTEXT_FLAG_NEGATIONS`), another's as "…, highest at an
earlier step"."""

CONTEXT_FLAG_NEGATIONS: dict[str, str] = {
    "at an earlier step: ": "at no earlier step: ",
    "at a later step: ": "at no later step: ",
}
"""The opening of a context flag's phrase, and what it becomes when the flag is not set."""

for _name, (_phrase, _shown) in list(FEATURE_LABELS.items()):
    for _suffix, _opening in zip((_BEFORE, _AFTER), CONTEXT_FLAG_NEGATIONS, strict=True):
        FEATURE_LABELS[f"{_name}{_suffix}"] = (
            f"{_opening}{_phrase}"
            if _shown == "flag"
            else f"{_phrase}, highest {_opening.rstrip(': ')}",
            _shown,
        )


def feature_names(prefix_only: bool = False) -> tuple[str, ...]:
    """Column names of `step_features(..., prefix_only=prefix_only)`."""
    return tuple(f.name for f in (PREFIX_FEATURES if prefix_only else FEATURES))


# --- text facts ---------------------------------------------------------------------

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

_REPEAT_WINDOW = 5
# Bounds the quadratic cost of loop detection on long runs.
_LOOP_WINDOW = 20
_LOOP_SIMILARITY = 0.8  # 4/5, which `_may_loop` relies on
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


def _normalise_text(text: str) -> str:
    return " ".join(_words(text.casefold()))


def _number_value(token: str) -> float | None:
    try:
        return float(token.replace(",", ""))
    except ValueError:
        return None


def _numbers(text: str) -> set[float]:
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
class _AnswerMatcher:
    """Whether a text contains an answer: by value when it is a number, else by words."""

    number: float | None
    words: str

    @classmethod
    def of(cls, answer: str | None) -> _AnswerMatcher | None:
        if answer is None or not answer.strip():
            return None
        number = _single_number(answer)
        words = _normalise_text(answer)
        if number is None and len(words) < _MIN_TEXT_ANSWER:
            return None
        return cls(number, words)

    def found_in(self, numbers: set[float], normalised: str) -> bool:
        if self.number is not None:
            return self.number in numbers
        return f" {self.words} " in f" {normalised} "


@dataclass(frozen=True)
class _StepFacts:
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


def _facts(step: Step, task: str) -> tuple[_StepFacts, str]:
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
    facts = _StepFacts(
        agent=step.agent,
        acting=acting,
        words=words,
        normalised=normalised,
        numbers=_numbers(text),
        error=error,
        length=len(step.content),
        ledger=ledger,
        stalled=ledger and bool(_LEDGER_STALLED.search(lowered)),
        criticism=_word_cue(lowered, words, _CRITICISM_WORDS, _CRITICISM_HINTS, _CRITICISM)
        if acting
        else 0.0,
    )
    return facts, lowered


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    common = len(a & b)
    return common / (len(a) + len(b) - common)


def _may_loop(a: frozenset[str], b: frozenset[str]) -> bool:
    """False when the Jaccard similarity is surely below `_LOOP_SIMILARITY` (0.8).

    The similarity is at most the ratio of the smaller set's size to the larger's; that
    ratio, compared in integers, is below 4/5 for sets of very different sizes.
    """
    return 5 * len(a) >= 4 * len(b) and 5 * len(b) >= 4 * len(a)


def _overlap(reference: frozenset[str] | None, words: frozenset[str]) -> float:
    if not reference:
        return 0.0
    return len(reference & words) / len(reference)


def _handoff_target(step: Step) -> str | None:
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


# --- prefix features ----------------------------------------------------------------


class PrefixScanner:
    """Reads a run one step at a time and gives each step's prefix-safe features.

    The row for step i is computed from steps 0..i (plus the task and the ground
    truth) and never changes afterwards, so the online auditor can score a run while
    it streams in and `step_features(prefix_only=True)` is prefix-invariant by
    construction.
    """

    def __init__(
        self, task: str, ground_truth: str | None = None, *, use_ground_truth: bool = True
    ) -> None:
        self.task = task
        self._gt = _AnswerMatcher.of(ground_truth) if use_ground_truth else None
        self._task_words = frozenset(_normalise_text(task).split())
        self._task_numbers = _numbers(task)
        self._seen_numbers: set[float] = set(self._task_numbers)
        self._seen_words: set[str] = set(self._task_words)
        self.facts: list[_StepFacts] = []
        self.rows: list[dict[str, float]] = []
        self._seen_agents: set[str] = set()
        self._agent_history: dict[str, list[int]] = {}
        self._agent_length: dict[str, int] = {}
        self._first_agent: str | None = None
        self._first_acting: int | None = None
        self._acting_before = 0
        self._errors_before = 0
        self._stalled_before = False
        self._pending_handoff: str | None = None
        self._instructions: dict[str, frozenset[str]] = {}
        self._directors: set[str] = set()
        self._gt_seen = False
        self._contradiction_seen = False
        # Prefix rows with their context columns, built as they are asked for.
        self._prefix_rows: list[list[float]] = []
        self._highest_so_far: list[float] = [0.0] * len(_PREFIX_STEP_NAMES)

    def __len__(self) -> int:
        return len(self.rows)

    def push(self, step: Step) -> dict[str, float]:
        """Add the next step (its index must equal the number of steps pushed so far)."""
        i = len(self.rows)
        if step.index != i:
            raise ValueError(f"expected step {i} next, got step {step.index}")
        fact, lowered = _facts(step, self.task)
        facts = self.facts
        history = self._agent_history.get(step.agent, [])
        window = history[-_LOOP_WINDOW:]
        recent = [_jaccard(fact.words, facts[j].words) for j in window[-_REPEAT_WINDOW:]]
        loops = sum(s >= _LOOP_SIMILARITY for s in recent) + sum(
            1
            for j in window[:-_REPEAT_WINDOW]
            if _may_loop(fact.words, facts[j].words)
            and _jaccard(fact.words, facts[j].words) >= _LOOP_SIMILARITY
        )
        mean_length = self._agent_length.get(step.agent, 0) / len(history) if history else 0.0
        gt = self._gt
        gt_here = bool(gt and gt.found_in(fact.numbers, fact.normalised))
        contradicts = bool(
            gt is not None
            and gt.number is not None
            and fact.numbers - self._task_numbers
            and gt.number not in fact.numbers
        )
        if fact.acting and self._first_acting is None:
            self._first_acting, self._first_agent = i, step.agent
        kind = step.kind
        target = _handoff_target(step)
        row = {
            "position": float(i),
            "log_position": math.log1p(i),
            "is_acting": float(fact.acting),
            "kind_message": float(kind is StepKind.MESSAGE),
            "kind_tool": float(kind is StepKind.TOOL),
            "kind_handoff": float(kind is StepKind.HANDOFF or target is not None),
            "kind_human": float(kind is StepKind.HUMAN),
            "kind_other": float(kind in (StepKind.LLM, StepKind.SYSTEM)),
            "acting_rank": float(self._acting_before),
            "is_first_acting": float(i == self._first_acting),
            "agent_turn": float(len(history)),
            "agent_first_turn": float(not history),
            "agents_before": float(len(self._seen_agents)),
            "agent_is_first_speaker": float(step.agent == self._first_agent),
            "error_in_step": fact.error,
            "error_in_previous": facts[i - 1].error if i > 0 else 0.0,
            "errors_before": math.log1p(self._errors_before),
            "first_error_here": float(fact.error > 0 and self._errors_before == 0),
            "repetition": max(recent, default=0.0),
            "loop_count": math.log1p(loops),
            "log_length": math.log1p(fact.length),
            "length_vs_agent": (
                math.log((fact.length + 1) / (mean_length + 1)) if history else 0.0
            ),
            "code_blocks": float(len(_CODE_FENCE.findall(step.content)) // 2),
            "task_overlap": (
                len(self._task_words & fact.words) / len(self._task_words)
                if self._task_words
                else 0.0
            ),
            "new_numbers": math.log1p(len(fact.numbers - self._seen_numbers)),
            "new_words": (
                len(fact.words - self._seen_words) / len(fact.words) if fact.words else 0.0
            ),
            "hedging": _word_cue(lowered, fact.words, _HEDGING_WORDS, _HEDGING_HINTS, _HEDGING),
            "apology": _word_cue(lowered, fact.words, _APOLOGY_WORDS, _APOLOGY_HINTS, _APOLOGY),
            "verification": _cue(lowered, _VERIFY_HINTS, _VERIFY),
            "terminates": _cue(lowered, _TERMINATE_HINTS, _TERMINATE),
            "ledger_stalled_before": float(self._stalled_before),
            "answers_handoff": float(
                self._pending_handoff is not None and self._pending_handoff == step.agent
            ),
            "agent_directs": float(step.agent in self._directors or target is not None),
            "instruction_overlap": _overlap(self._instructions.get(step.agent), fact.words),
            "gt_mentioned": float(gt_here),
            "gt_mentioned_before": float(self._gt_seen),
            "numbers_contradict_gt": float(contradicts),
            "first_numbers_contradict_gt": float(contradicts and not self._contradiction_seen),
        }
        facts.append(fact)
        self.rows.append(row)
        # State for later steps: only what this step adds.
        self._seen_agents.add(step.agent)
        self._agent_history.setdefault(step.agent, []).append(i)
        self._agent_length[step.agent] = self._agent_length.get(step.agent, 0) + fact.length
        self._acting_before += fact.acting
        self._errors_before += fact.error > 0
        if fact.ledger:
            self._stalled_before = fact.stalled
        if target is not None:
            self._pending_handoff = target
            self._directors.add(step.agent)
            if fact.words:
                self._instructions[target] = fact.words
        elif fact.acting and step.agent == self._pending_handoff:
            self._pending_handoff = None
        self._seen_numbers |= fact.numbers
        self._seen_words |= fact.words
        self._gt_seen = self._gt_seen or gt_here
        self._contradiction_seen = self._contradiction_seen or contradicts
        return row

    def prefix_row(self, index: int) -> list[float]:
        """Step `index`'s prefix-safe features in the order of `PREFIX_FEATURES`: its own,
        then their highest values at the steps before it."""
        while len(self._prefix_rows) <= index:
            first = not self._prefix_rows
            own = [self.rows[len(self._prefix_rows)][name] for name in _PREFIX_STEP_NAMES]
            self._prefix_rows.append(own + self._highest_so_far)
            self._highest_so_far = own if first else list(map(max, self._highest_so_far, own))
        return list(self._prefix_rows[index])


_STEP_NAMES = tuple(f.name for f in STEP_FEATURES)
_PREFIX_STEP_NAMES = tuple(f.name for f in STEP_FEATURES if f.prefix_safe)


# --- the matrix ---------------------------------------------------------------------


def step_features(
    trajectory: Trajectory, *, use_ground_truth: bool = True, prefix_only: bool = False
) -> list[list[float]]:
    """One row per step, columns in the order of `feature_names(prefix_only)`.

    With `prefix_only`, only prefix-safe features are computed and row i is the same
    whatever steps follow step i (the auditor's guarantee). Without `use_ground_truth`
    the ground-truth features are 0.
    """
    scanner = PrefixScanner(
        trajectory.task, trajectory.ground_truth, use_ground_truth=use_ground_truth
    )
    for step in trajectory.steps:
        scanner.push(step)
    if prefix_only:
        return [scanner.prefix_row(i) for i in range(len(scanner))]
    rows = [dict(row) for row in scanner.rows]
    _add_whole_run_features(trajectory, scanner.facts, rows, use_ground_truth)
    own = [[row[name] for name in _STEP_NAMES] for row in rows]
    return _with_context(own)


def _with_context(own: list[list[float]]) -> list[list[float]]:
    """Each row followed by the highest value of each column at the earlier rows, then at
    the later rows (0 where there is none), as `CONTEXT_FEATURES` lists them."""
    if not own:
        return []
    columns = list(zip(*own, strict=True))
    before = zip(*map(_highest_before, columns), strict=True)
    after = zip(*(_highest_before(column[::-1])[::-1] for column in columns), strict=True)
    return [[*row, *b, *a] for row, b, a in zip(own, before, after, strict=True)]


def _highest_before(column: Sequence[float]) -> list[float]:
    """For each position, the highest earlier value (0.0 at the first). A plain loop:
    a comparison per value is several times cheaper than a call of `max`."""
    highest_so_far = [0.0]
    highest = column[0]
    for value in column[1:]:
        highest_so_far.append(highest)
        if value > highest:
            highest = value
    return highest_so_far


def _add_whole_run_features(
    trajectory: Trajectory,
    facts: Sequence[_StepFacts],
    rows: list[dict[str, float]],
    use_ground_truth: bool,
) -> None:
    n = len(facts)
    # Acting step answerable for each step: itself or the nearest earlier acting step.
    owner: list[int | None] = []
    current: int | None = None
    for i, fact in enumerate(facts):
        if fact.acting:
            current = i
        owner.append(current)

    error_after = [0.0] * n
    contradiction_after = [0.0] * n
    first_blamed: int | None = None
    for i, fact in enumerate(facts):
        answerable = owner[i]
        if answerable is not None and answerable != i and rows[i]["numbers_contradict_gt"]:
            contradiction_after[answerable] = 1.0
        if fact.error <= 0 or answerable is None:
            continue
        if first_blamed is None:
            first_blamed = answerable
        if answerable != i:
            error_after[answerable] = max(error_after[answerable], fact.error)

    # A ledger that follows the step before its agent acts again judges that step.
    stalled_after = [0.0] * n
    verdict: float | None = None
    acted_since: set[str] = set()
    for i in range(n - 1, -1, -1):
        agent = facts[i].agent
        if verdict is not None and agent not in acted_since:
            stalled_after[i] = verdict
        if facts[i].ledger:
            verdict = float(facts[i].stalled)
            acted_since = set()
        elif facts[i].acting:
            acted_since.add(agent)

    # The next acting step by another agent reacts to this one.
    criticised = [0.0] * n
    next_reaction: tuple[str, float] | None = None
    for i in range(n - 1, -1, -1):
        if next_reaction is not None and next_reaction[0] != facts[i].agent:
            criticised[i] = next_reaction[1]
        if facts[i].acting:
            next_reaction = (facts[i].agent, facts[i].criticism)

    final = _AnswerMatcher.of(extract_final_answer(trajectory))
    gt = _AnswerMatcher.of(trajectory.ground_truth) if use_ground_truth else None
    first_final: int | None = None
    if final is not None and (gt is None or final.words != gt.words):
        first_final = next(
            (i for i, f in enumerate(facts) if final.found_in(f.numbers, f.normalised)), None
        )

    counts: dict[str, int] = {}
    acting_counts: dict[str, int] = {}
    error_counts: dict[str, int] = {}
    last_turn: dict[str, int] = {}
    for i, fact in enumerate(facts):
        counts[fact.agent] = counts.get(fact.agent, 0) + 1
        acting_counts[fact.agent] = acting_counts.get(fact.agent, 0) + fact.acting
        last_turn[fact.agent] = i
        answerable = owner[i]
        if fact.error > 0 and answerable is not None:
            blamed = facts[answerable].agent
            error_counts[blamed] = error_counts.get(blamed, 0) + 1
    total_errors = sum(error_counts.values())

    for i, row in enumerate(rows):
        agent = facts[i].agent
        row["relative_position"] = i / (n - 1) if n > 1 else 0.0
        row["log_steps_total"] = math.log1p(n)
        row["log_steps_to_end"] = math.log1p(n - 1 - i)
        row["agent_last_turn"] = float(last_turn[agent] == i)
        row["error_after"] = error_after[i]
        row["first_error_blame"] = float(i == first_blamed)
        row["ledger_stalled_after"] = stalled_after[i]
        row["criticised_next"] = criticised[i]
        row["contradiction_after"] = contradiction_after[i]
        row["final_answer_first_mention"] = float(i == first_final)
        row["agent_share"] = counts[agent] / n
        row["agent_error_share"] = (
            error_counts.get(agent, 0) / total_errors if total_errors else 0.0
        )
        row["agent_acting_turns"] = math.log1p(acting_counts[agent])
