"""What each step of a run shows, in words: the evidence behind a zero-LLM attribution.

Evidence is read from the run itself and holds on any framework: a figure an agent
states right after a tool reported other figures, the first statement of a final answer
nothing observed supports, a figure no observation holds, a tool error after an agent's
call (decisive when the run ended on it, a cue when a later call of the tool got past it:
`errors`), a figure contradicting the correct answer, the first time an agent repeats a tool
call whose answer it already has, a turn that passes on none of the figures its own
tools just returned, an opening turn that leaves the run to others before anything was
looked up, a superlative ("the cheapest is X") that the records a tool returned
contradict or a figure of one record given to another, a calculation whose written result
does not follow from its own operands (`arithmetic`), a decision the task forbids in so
many words (`constraints`), an earlier call that changed the order or booking a later
step could no longer change (`consequences`), repetition, invented data, giving up; a
simulated user's turn withholding an identifier its instructions give it (`simulated_user`).
Each item has a strength in (0, 1] fixed by how unambiguous it is (not fitted), and one
sentence that names the agents, tools and figures involved.

Each step's own evidence falls in a band (`tier`: `DECISIVE_STRENGTH`, `STRONG`, a cue,
none); how the bands and the learned scorer share the choice of the blamed step is the
attributor's `Decision` (by default decisive evidence leads, and a leader with no evidence
of its own yields to strong evidence of what a step did wrong).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from faultfinder.attributors.arithmetic import ArithmeticChecks
from faultfinder.attributors.comparisons import RecordChecks
from faultfinder.attributors.consequences import LaterRefusals
from faultfinder.attributors.constraints import TaskConstraints
from faultfinder.attributors.errors import FAILURE_WORDS, ErrorOutcome, error_sentence, outcomes
from faultfinder.attributors.excerpts import quoted
from faultfinder.attributors.heuristics import ErrorSignal, shown_errors
from faultfinder.attributors.learned.blame import callers
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
    "POINTS_ELSEWHERE",
    "RELAYED",
    "STRONG",
    "USER_WITHHELD",
    "Evidence",
    "is_tool_answer",
    "own_evidence",
    "step_evidence",
    "strongest",
    "tier",
]

STRONG = 0.6
"""Evidence at least this strong decides between steps (see the module's docstring)."""

_NOT_ACTING = frozenset({StepKind.TOOL, StepKind.HUMAN, StepKind.SYSTEM})


DECISIVE = frozenset(
    {"contradicts-records", "misattributed-figure", "user-withheld", "wrong-arithmetic"}
)
"""Evidence the run's own data proves (for a simulated user that withheld what its
instructions gave it, the run's data and those instructions together; for a calculation
written out wrong, the step's own operands): a step carrying it leads over every step
whose evidence is weaker, before or after it, whatever the model's features say of that
step (`DECISIVE_STRENGTH`)."""
DECISIVE_STRENGTH = 0.9
"""The strength of `DECISIVE` evidence, and of the error a run ended on."""

USER_WITHHELD = frozenset({"user-withheld"})
"""A simulated user's turn withholding what its instructions give it (`DECISIVE`): the
user answers for the step (not the agent with the most probability mass)."""

RELAYED = frozenset({"repeats-unsupported-figure"})
"""Evidence that a step passed on someone else's error: it points at the origin."""

HANDED_ON_NOTHING = frozenset({"handed-on-nothing"})
"""A turn that left the run to others before anything was looked up: weighed only against
what the next agent then made up (`_withheld_first`), never as the turn's own evidence."""
HANDED_ON = frozenset({"withheld-figures", *HANDED_ON_NOTHING})
"""Evidence that a turn left the next agent without the figures it needed: what that
agent then made up or failed at points back at the turn."""


POINTS_ELSEWHERE = frozenset({*RELAYED, *HANDED_ON_NOTHING, "shows-error", "shows-consequence"})
"""Evidence a step carries that answers to another step: a figure relayed from its
origin, a figure-less handover (weighed by the attributor against what followed), a
report's error (the agent that made the failing call answers for it), an earlier call's
consequence."""


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


def step_evidence(
    trajectory: Trajectory, features: RunFeatures, *, complete: bool = True
) -> list[list[Evidence]]:
    """Each step's evidence, strongest first (see the module's docstring). `complete`:
    the trajectory is the whole run, not the prefix of one still streaming in (only a
    whole run can have ended on an error)."""
    steps = trajectory.steps
    facts = features.scanner.facts
    found: list[list[Evidence]] = [[] for _ in steps]
    # Who made each step: a tool call answers to the agent it records when that agent
    # acts in the run, else to the agent that acted last.
    caller = callers(steps)
    repeats = _RepeatedCalls()
    record_checks = RecordChecks(trajectory.task)
    written = _WrittenChecks(trajectory.task)
    # The learned features read every error signal (`facts[i].error`); evidence only the
    # errors the run shows, and what became of them (`errors`).
    shown = [
        shown_errors(step, trajectory.task) if facts[i].error > 0 else []
        for i, step in enumerate(steps)
    ]
    after = outcomes(steps, [bool(signals) for signals in shown], [f.acting for f in facts])
    # The run stopped on the first error nothing recovered and after which no tool
    # answered: a call's failure, not an agent saying it could not go on (a cue).
    crash = next(
        (
            i
            for i, outcome in enumerate(after)
            if complete
            and outcome is not None
            and outcome.ended_run
            and not (facts[i].acting and shown[i][0].label in FAILURE_WORDS)
        ),
        None,
    )
    for i, step in enumerate(steps):
        if facts[i].acting:
            found[i].extend(_value_evidence(trajectory, features, i))
            found[i].extend(_cue_evidence(step.agent, features.named[i], i))
        found[i].extend(written.push(step, i, acting=facts[i].acting))
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
            owner = caller[i]
            if owner is not None:
                found[owner].append(_argument_evidence(steps[owner].agent, arguments, owner))
        outcome = after[i]
        if outcome is not None:
            error = _error_evidence(trajectory, shown[i][0], i, caller[i], outcome, crash == i)
            if error is not None:
                found[error.step].append(error)
                if error.step != i:
                    # The report shows the error too (it answers to the agent that acted).
                    found[i].append(Evidence(i, "shows-error", error.strength, error.text))
    for item in _whole_run_evidence(trajectory, features, found) + _refused(steps, caller, shown):
        found[item.step].append(item)
    for items in found:
        items.sort(key=lambda item: -item.strength)
    return found


_BROKEN_CONSTRAINT_STRENGTH = 0.7
"""A decision the task forbids in so many words: strong evidence, below `DECISIVE_STRENGTH`
(the words matched, their meaning in context may not)."""


class _WrittenChecks:
    """What an acting step writes, checked against itself and the task: a calculation whose
    stated result its operands do not give (`arithmetic`: decisive, the step's own text
    proves it) and the first step doing what the task forbids (`constraints`: strong)."""

    def __init__(self, task: str) -> None:
        self._arithmetic = ArithmeticChecks(task)
        self._constraints = TaskConstraints(task)

    def push(self, step: Step, i: int, *, acting: bool) -> list[Evidence]:
        out: list[Evidence] = []
        wrong = self._arithmetic.push(step, acting=acting)
        if wrong is not None:
            out.append(Evidence(i, wrong.kind, DECISIVE_STRENGTH, wrong.said_by(step.agent)))
        broken = self._constraints.push(step, acting=acting)
        if broken is not None:
            text = broken.said_by(step.agent)
            out.append(Evidence(i, broken.kind, _BROKEN_CONSTRAINT_STRENGTH, text))
        return out


def _refused(
    steps: Sequence[Step], caller: Sequence[int | None], shown: Sequence[Sequence[object]]
) -> list[Evidence]:
    """A refusal an earlier call caused (`consequences`): strong evidence on the acting step
    that made the call (which call is shown, not how it went wrong), a pointer on the refusal."""
    refusals, out = LaterRefusals(), []
    for i, step in enumerate(steps):
        refused = refusals.push(step, i, actor=caller[i], error=bool(shown[i]))
        if refused is not None:
            out.append(Evidence(refused.cause, refused.kind, 0.65, refused.caused()))
            out.append(Evidence(i, "shows-consequence", 0.3, refused.shown()))
    return out


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
        answer = quoted(trajectory.final_answer or "", 40)
        text = (
            f"{agent} was the first to state the final answer {answer}, which nothing"
            " observed before it supports"
        )
        out.append(Evidence(i, "made-up-final-answer", 0.95, text))
    if row.get("final_answer_first_claim") and not row.get("final_value_origin"):
        answer = quoted(trajectory.final_answer or "", 40)
        wrong = features.scanner.uses_ground_truth
        text = f"{agent} was the first agent to state the final answer {answer}"
        out.append(Evidence(i, "first-to-state-final-answer", 0.6 if wrong else 0.5, text))
    if row.get("first_numbers_contradict_gt"):
        truth = quoted(trajectory.ground_truth or "", 40)
        text = f"{agent} was the first to state figures none of which is the correct answer {truth}"
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
                    f" {quoted(arguments, 60)} after {tool} had answered"
                    f" {quoted(self._answered[answered[0]], 60)}"
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


_ERROR_STRENGTH = 0.8
"""An error the run did not get past, at full signal strength: strong evidence, below
`DECISIVE_STRENGTH`, which the error the run ended on takes."""
_RECOVERED_STRENGTH = 0.3
"""An error a later call of the same tool got past: a cue, not what decided the run."""


def _error_evidence(
    trajectory: Trajectory,
    signal: ErrorSignal,
    i: int,
    actor: int | None,
    outcome: ErrorOutcome,
    ended_run: bool,
) -> Evidence | None:
    """An error shown at step `i`: the agent's own, or a report's that answers to the agent
    that acted last (`actor`), the one that made the failing call. Its strength says what
    became of it (`errors.outcomes`): the run's first error that nothing recovered and
    after which no tool answered is where the run stopped (`DECISIVE_STRENGTH`); an error
    a later call of the same tool got past is a cue (`recovered-error`)."""
    steps = trajectory.steps
    step = steps[i]
    if ended_run:
        strength, note = DECISIVE_STRENGTH, ", and the run ended on it"
    elif outcome.recovered_at is not None:
        strength = _RECOVERED_STRENGTH
        note = f", though a later call succeeded (step {outcome.recovered_at})"
    else:
        strength, note = _ERROR_STRENGTH * signal.strength, ""
    own_kind, report_kind = ("error", "tool-error")
    if outcome.recovered:
        own_kind = report_kind = "recovered-error"
    if i == actor:
        text = error_sentence(steps, i, i, signal.label, signal.excerpt) + note
        return Evidence(i, own_kind, strength, text)
    if actor is None or step.kind not in _NOT_ACTING:
        return None
    text = error_sentence(steps, actor, i, signal.label, signal.excerpt) + note
    return Evidence(actor, report_kind, strength, text)


def strongest(items: Sequence[Evidence]) -> float:
    return items[0].strength if items else 0.0


def own_evidence(items: Sequence[Evidence]) -> list[Evidence]:
    """A step's evidence of its own, strongest first (not what `POINTS_ELSEWHERE`)."""
    return [item for item in items if item.kind not in POINTS_ELSEWHERE]


def tier(items: Sequence[Evidence]) -> int:
    """How strong a step's own evidence is, in bands fixed a priori: 3 for `DECISIVE`
    strength (what the run's own data proves, the error it ended on), 2 for `STRONG`,
    1 for a cue, 0 for none. Steps are ranked by band; the model orders each band."""
    best = strongest(own_evidence(items))
    if best >= DECISIVE_STRENGTH:
        return 3
    if best >= STRONG:
        return 2
    return 1 if best > 0 else 0
