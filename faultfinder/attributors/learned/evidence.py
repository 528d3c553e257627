"""What each step of a run shows, in words: the evidence behind a zero-LLM attribution.

Evidence is read from the run itself and holds on any framework: a figure an agent
states right after a tool reported other figures, the first statement of a final answer
nothing observed supports, a figure no observation holds, a tool error after an agent's
call, a figure contradicting the correct answer, the first time an agent repeats a tool
call whose answer it already has, a turn that passes on none of the figures its own
tools just returned, an opening turn that leaves the run to others before anything was
looked up, a superlative ("the cheapest is X") that the records a tool returned
contradict or a figure of one record given to another, repetition, invented data, giving
up; a simulated user's turn withholding an identifier its instructions give it
(`simulated_user`).
Each item has a strength in (0, 1] fixed by how unambiguous it is (not fitted), and one
sentence that names the agents, tools and figures involved.

`STRONG` evidence decides between steps: a step with none of it never outranks a step
that has some, whatever its position (the learned scorer's positional habits may break
ties, never outvote evidence).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from faultfinder.attributors.comparisons import RecordChecks
from faultfinder.attributors.heuristics import error_signals
from faultfinder.attributors.learned.features import RunFeatures
from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.attributors.provenance import tool_calls
from faultfinder.attributors.simulated_user import withheld_by_user

__all__ = [
    "CUES",
    "DECISIVE",
    "DECISIVE_STRENGTH",
    "HANDED_ON",
    "HANDED_ON_NOTHING",
    "RELAYED",
    "STRONG",
    "USER_WITHHELD",
    "Evidence",
    "is_tool_answer",
    "step_evidence",
    "strongest",
]

STRONG = 0.6
"""Evidence at least this strong decides between steps (see the module's docstring)."""

_NOT_ACTING = frozenset({StepKind.TOOL, StepKind.HUMAN, StepKind.SYSTEM})


DECISIVE = frozenset({"contradicts-records", "misattributed-figure", "user-withheld"})
"""Evidence the run's own data proves (for a simulated user that withheld what its
instructions gave it, the run's data and those instructions together): a step carrying it
leads over a step that carries no evidence, whatever the model's features say of that
step, and over a later step whose evidence is weaker (`DECISIVE_STRENGTH`)."""
DECISIVE_STRENGTH = 0.9
"""The strength of `DECISIVE` evidence."""

USER_WITHHELD = frozenset({"user-withheld"})
"""A simulated user's turn withholding what its instructions give it (`DECISIVE`): it
also leads over an earlier step whose only evidence is a cue (`CUES`: an apology, a
repetition), though not over one that shows an error or a figure of its own."""

RELAYED = frozenset({"repeats-unsupported-figure"})
"""Evidence that a step passed on someone else's error: it points at the origin."""

HANDED_ON_NOTHING = frozenset({"handed-on-nothing"})
"""A turn that left the run to others before anything was looked up: weighed only against
what the next agent then made up (`_withheld_first`), never as the turn's own evidence."""
HANDED_ON = frozenset({"withheld-figures", *HANDED_ON_NOTHING})
"""Evidence that a turn left the next agent without the figures it needed: what that
agent then made up or failed at points back at the turn."""


@dataclass(frozen=True)
class Evidence:
    step: int
    kind: str
    strength: float
    text: str


def _figures(tokens: Sequence[str], limit: int = 3) -> str:
    shown = list(tokens[:limit])
    if len(tokens) > limit:
        shown.append("…")
    return ", ".join(shown)


def _quote(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _reporter(step: Step) -> str:
    return step.tool_name or step.agent


def step_evidence(trajectory: Trajectory, features: RunFeatures) -> list[list[Evidence]]:
    """Each step's evidence, strongest first (see the module's docstring)."""
    steps = trajectory.steps
    facts = features.scanner.facts
    found: list[list[Evidence]] = [[] for _ in steps]
    actor: int | None = None
    repeats = _RepeatedCalls()
    record_checks = RecordChecks(trajectory.task)
    for i, step in enumerate(steps):
        if facts[i].acting:
            actor = i
            found[i].extend(_value_evidence(trajectory, features, i))
            found[i].extend(_cue_evidence(step.agent, features.named[i], i))
        finding = record_checks.push(step, acting=facts[i].acting)
        if finding is not None:
            found[i].append(
                Evidence(i, finding.kind, DECISIVE_STRENGTH, finding.said_by(step.agent))
            )
        repeated = repeats.push(step, i, acting=facts[i].acting, error=facts[i].error > 0)
        if repeated is not None:
            found[i].append(repeated)
        arguments = features.scanner.values[i].unsupported_arguments
        if arguments:
            owner = i if facts[i].acting else actor
            if owner is not None:
                found[owner].append(_argument_evidence(steps[owner].agent, arguments, owner))
        if facts[i].error > 0:
            error = _error_evidence(trajectory, features, i, actor)
            if error is not None:
                found[error.step].append(error)
                if error.step != i:
                    # The report shows the error too (it answers to the agent that acted).
                    found[i].append(Evidence(i, "shows-error", error.strength, error.text))
    for item in _whole_run_evidence(trajectory, features, found):
        found[item.step].append(item)
    for items in found:
        items.sort(key=lambda item: -item.strength)
    return found


def _whole_run_evidence(
    trajectory: Trajectory, features: RunFeatures, found: Sequence[Sequence[Evidence]]
) -> list[Evidence]:
    """Evidence only the whole run shows: a figure-less opening handover
    (`_handed_on_nothing`) and a simulated user's turn withholding what its instructions
    give it (`USER_WITHHELD`)."""
    out: list[Evidence] = []
    handed = _handed_on_nothing(trajectory, features, found)
    if handed is not None:
        out.append(handed)
    withheld = withheld_by_user(trajectory)
    if withheld is not None:
        text = withheld.text()
        out.append(Evidence(withheld.step, "user-withheld", DECISIVE_STRENGTH, text))
    return out


_MADE_UP = frozenset(
    {"unsupported-figure", "unsupported-argument", "made-up-final-answer", "error", "tool-error"}
)
"""What an agent given nothing to work with shows: figures or arguments nothing observed
supports, or an error."""


def _handed_on_nothing(
    trajectory: Trajectory, features: RunFeatures, found: Sequence[Sequence[Evidence]]
) -> Evidence | None:
    """The run's opening turn, when with it its agent left the run to others before
    anything was looked up: no tool had answered, the turn calls no tool (a delegation
    does hand the work on) and states no figure of its own, its agent never acts again,
    and another agent then made something up or failed (`_MADE_UP`) before any tool
    answered it. What that agent did followed from being given nothing (`HANDED_ON`).

    Not in a group chat whose tool reports are a shared terminal's (no tool named): there
    the opening message sets the task for the group, and what was looked up is not one
    agent's to hand on (as for `withheld-figures`)."""
    steps = trajectory.steps
    facts = features.scanner.facts
    acting = [i for i, fact in enumerate(facts) if fact.acting]
    if not acting or any(step.kind is StepKind.TOOL and not step.tool_name for step in steps):
        return None
    first = acting[0]
    step = steps[first]
    value = features.scanner.values[first]
    if (
        any(is_tool_answer(earlier) for earlier in steps[:first])
        or step.kind is StepKind.HANDOFF
        or tool_calls(step)
        or value.introduced
        or value.contradicts
        or any(steps[i].agent == step.agent for i in acting[1:])
    ):
        return None
    for j in range(first + 1, len(steps)):
        if is_tool_answer(steps[j]):
            return None
        if facts[j].acting and any(item.kind in _MADE_UP for item in found[j]):
            text = (
                f"{step.agent} handed the run on to {steps[j].agent} before anything was"
                " looked up: it called no tool, gave no figure of its own and did not act"
                " again"
            )
            return Evidence(first, "handed-on-nothing", 0.5, text)
    return None


def is_tool_answer(step: Step) -> bool:
    """Whether a step is a tool's answer."""
    return step.kind is StepKind.TOOL or bool(step.tool_result)


def _value_evidence(trajectory: Trajectory, features: RunFeatures, i: int) -> list[Evidence]:
    """What an agent step says about figures: contradicting the report it answers, making
    a figure up, repeating one, first stating an unsupported final answer or figures that
    contradict the correct answer."""
    agent = trajectory.steps[i].agent
    value = features.scanner.values[i]
    row = features.named[i]
    out: list[Evidence] = []
    if value.contradicts:
        text = (
            f"{agent} stated {_figures(value.unsupported)} right after {value.answered}"
            f" {value.answered_verb} {_figures(value.answered_figures)}"
        )
        out.append(Evidence(i, "contradicts-report", 1.0, text))
    elif value.introduced:
        text = (
            f"{agent} stated {_figures(value.introduced)}, which no earlier tool output, user"
            " message or the task holds or gives by one calculation"
        )
        out.append(Evidence(i, "unsupported-figure", 0.75, text))
    elif value.unsupported:
        text = f"{agent} repeated {_figures(value.unsupported)}, a figure no observation supports"
        out.append(Evidence(i, "repeats-unsupported-figure", 0.3, text))
    if value.withheld is not None:
        text = (
            f"{agent} passed its turn on without any of the figures {value.withheld}"
            f" returned ({_figures(value.withheld_figures)})"
        )
        out.append(Evidence(i, "withheld-figures", 0.5, text))
    if row.get("final_value_origin"):
        answer = _quote(trajectory.final_answer or "", 40)
        text = (
            f"{agent} was the first to state the final answer {answer!r}, which nothing"
            " observed before it supports"
        )
        out.append(Evidence(i, "made-up-final-answer", 0.95, text))
    if row.get("final_answer_first_claim") and not row.get("final_value_origin"):
        answer = _quote(trajectory.final_answer or "", 40)
        wrong = features.scanner.uses_ground_truth
        text = f"{agent} was the first agent to state the final answer {answer!r}"
        out.append(Evidence(i, "first-to-state-final-answer", 0.6 if wrong else 0.5, text))
    if row.get("first_numbers_contradict_gt"):
        truth = _quote(trajectory.ground_truth or "", 40)
        text = (
            f"{agent} was the first to state figures none of which is the correct answer {truth!r}"
        )
        out.append(Evidence(i, "contradicts-ground-truth", 0.6, text))
    return out


class _RepeatedCalls:
    """Finds the first step at which an agent calls a tool again with the same arguments
    after that call was answered without an error: the answer was already there, so the
    agent is looping (or did not read it). Only the first such step of a run is evidence;
    the repeats after it are the loop going on. A call repeated after an error is a retry,
    not a repeat."""

    def __init__(self) -> None:
        self._made: set[tuple[str, str, str]] = set()
        self._answered: dict[tuple[str, str], str] = {}
        self._found = False

    def push(self, step: Step, i: int, *, acting: bool, error: bool) -> Evidence | None:
        calls = tool_calls(step)
        if not calls:
            return None
        found = None
        if acting and not self._found:
            again = [call for call in calls if (step.agent, *call) in self._made]
            answered = [call for call in again if call in self._answered]
            if answered:
                self._found = True
                tool, arguments = answered[0]
                text = (
                    f"{step.agent} called {tool} again with the same arguments"
                    f" ({_quote(arguments, 60)}) after {tool} had answered"
                    f" {_quote(self._answered[answered[0]], 60)!r}"
                )
                found = Evidence(i, "repeated-call", 0.65, text)
        if acting:
            self._made.update((step.agent, *call) for call in calls)
        answer = step.tool_result or (step.content if step.kind is StepKind.TOOL else None)
        if answer and not error:
            for call in calls:
                self._answered.setdefault(call, answer)
        return found


def _argument_evidence(agent: str, arguments: Sequence[tuple[str, str, str]], i: int) -> Evidence:
    tool, name, value = arguments[0]
    text = (
        f"{agent} called {tool} with {name}={value!r}, which no earlier user message, tool"
        " output or the task mentions"
    )
    return Evidence(i, "unsupported-argument", 0.7, text)


_CUES = (
    ("hedging", "invented-data", 0.4, "{agent} assumed, simulated or invented data"),
    ("apology", "gave-up", 0.3, "{agent} apologised or said it could not go on"),
    ("criticised_next", "criticised", 0.45, "the next agent to speak called {agent}'s step wrong"),
)
CUES = frozenset({*(kind for _, kind, _, _ in _CUES), "repetition"})
"""The weak cues a step's words give (`_cue_evidence`), as opposed to what it shows."""


def _cue_evidence(agent: str, row: dict[str, float], i: int) -> list[Evidence]:
    """Weak cues: repetition, invented data, giving up, criticism by the next agent."""
    out = [
        Evidence(i, kind, strength, text.format(agent=agent))
        for feature, kind, strength, text in _CUES
        if row.get(feature)
    ]
    if row.get("loop_count", 0) > 0 or row.get("repetition", 0) >= 0.9:
        text = f"{agent} repeated one of its recent steps almost word for word"
        out.append(Evidence(i, "repetition", 0.35, text))
    return out


def _error_evidence(
    trajectory: Trajectory, features: RunFeatures, i: int, actor: int | None
) -> Evidence | None:
    """An error shown at step `i`: the agent's own, or a report's that answers to the agent
    that acted last (`actor`)."""
    step = trajectory.steps[i]
    fact = features.scanner.facts[i]
    signals = error_signals(step, trajectory.task)
    excerpt = f": {_quote(signals[0].excerpt)!r}" if signals and signals[0].excerpt else ""
    label = signals[0].label if signals else "an error"
    strength = 0.9 * fact.error
    if fact.acting:
        return Evidence(i, "error", strength, f"{step.agent}'s step shows {label}{excerpt}")
    if actor is None or step.kind not in _NOT_ACTING:
        return None
    text = (
        f"{_reporter(step)} reported {label} right after {trajectory.steps[actor].agent}"
        f" acted{excerpt}"
    )
    return Evidence(actor, "tool-error", strength, text)


def strongest(items: Sequence[Evidence]) -> float:
    return items[0].strength if items else 0.0
