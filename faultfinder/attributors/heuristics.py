"""Zero-LLM attributors: the uniform random baseline and the first-error heuristic.

Both are reference points for the LLM methods: `random` mirrors the published random
baseline, `first_error` is the cheap rule described in ATTRIBUTORS.md.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from faultfinder.attributors.base import AttributeOptions, register
from faultfinder.attributors.comparisons import RecordChecks
from faultfinder.attributors.errors import error_sentence, outcomes, shown
from faultfinder.attributors.excerpts import around
from faultfinder.attributors.model import (
    Attribution,
    Candidate,
    Step,
    StepKind,
    StepStatus,
    Trajectory,
    normalise_agent,
)
from faultfinder.attributors.provenance import Provenance
from faultfinder.attributors.simulated_user import UserWithheld, withheld_by_user

__all__ = [
    "ErrorSignal",
    "FirstError",
    "RandomAttributor",
    "error_signals",
    "is_acting_step",
    "own_doing",
    "shown_errors",
]


def _record_rng(seed: int | None, run_id: str) -> random.Random:
    """A generator for one trajectory: with a seed, the draw depends only on (seed, run id).

    Deriving the stream per run keeps results identical whatever order or concurrency
    the benchmark uses to visit the records.
    """
    if seed is None:
        return random.Random()
    digest = hashlib.sha256(f"{seed}\x00{run_id}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


@register("random")
class RandomAttributor:
    """Uniform agent among the system's agents and, independently, a uniform step.

    This is the random baseline of the Who&When paper; its expected accuracy on a
    record is 1/#agents (agent) and 1/#steps (step). The agents are the system's
    roster where the framework's team is known (`Trajectory.roster`), else the
    agents seen in the run.
    """

    name = "random"
    calls_model = False

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed

    async def attribute(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
        if not trajectory.steps:
            return Attribution.failed(self.name, "the trajectory has no steps")
        seed = options.seed if options.seed is not None else self.seed
        rng = _record_rng(seed, trajectory.run_id)
        agents = trajectory.roster
        agent = agents[rng.randrange(len(agents))]
        step = rng.randrange(len(trajectory.steps))
        share = 1.0 / len(trajectory.steps)
        return Attribution(
            method=self.name,
            agent=agent,
            step=step,
            reason="uniform random choice of agent and step (baseline)",
            confidence=share,
            candidates=tuple(
                Candidate(step=s.index, agent=s.agent, score=share) for s in trajectory.steps
            ),
            used_ground_truth=False,
            llm_calls=0,
            details={"seed": seed, "agents": len(agents), "steps": len(trajectory.steps)},
        )


# --- first-error heuristic -----------------------------------------------------------


@dataclass(frozen=True)
class ErrorSignal:
    """Evidence that a step's content shows an error."""

    label: str
    strength: float
    """How unambiguous the signal is, in (0, 1]."""
    excerpt: str = ""


# Fixed a priori from the method description (exceptions, tracebacks, "failed",
# "not found", "unable to", HTTP 4xx/5xx, non-zero exit codes, empty tool results);
# strengths rank how unambiguous each signal is, not how often it hits a label.
_TEXT_SIGNALS: tuple[tuple[str, float, re.Pattern[str]], ...] = (
    ("traceback", 1.0, re.compile(r"Traceback \(most recent call last\)")),
    ("non-zero exit code", 1.0, re.compile(r"exit\s*code:?\s*-?[1-9]\d*", re.IGNORECASE)),
    ("exception raised", 0.9, re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b:")),
    ("error message", 0.9, re.compile(r"\berror:", re.IGNORECASE)),
    # A JSON or Python-literal reply whose "error" field holds something: how many APIs
    # and tool wrappers answer a call they refused ({"error": "no order 'Desk Lamp'"}).
    (
        "error field",
        0.9,
        re.compile(
            r"""["'](?:error|errors|error_message)["']\s*:"""
            r"""(?!\s*(?:null\b|None\b|false\b|False\b|""|''|\[\s*\]|\{\s*\}))""",
            re.IGNORECASE,
        ),
    ),
    (
        "HTTP error status",
        0.8,
        re.compile(
            r"\b(?:HTTP(?:/\d(?:\.\d)?)?|status(?:\s+code)?:?)\s*[45]\d\d\b"
            r"|\b[45]\d\d\s+(?:Client|Server)\s+Error\b",
            re.IGNORECASE,
        ),
    ),
    ("exception", 0.7, re.compile(r"\bexception\b", re.IGNORECASE)),
    ("failed", 0.7, re.compile(r"\bfail(?:ed|s|ure)\b", re.IGNORECASE)),
    ("not found", 0.5, re.compile(r"\bnot\s+found\b", re.IGNORECASE)),
    ("unable to", 0.5, re.compile(r"\bunable\s+to\b", re.IGNORECASE)),
    ("cannot", 0.5, re.compile(r"\b(?:cannot|can't|can not|could not|couldn't)\b", re.IGNORECASE)),
)

# Lower-case fragments one of which every match of the signal's pattern contains, in
# the order of `_TEXT_SIGNALS`: a substring test on the lowered text is an exact
# pre-check, far cheaper than the regex scan. Case-insensitive matching also equates
# four non-ASCII characters with ASCII letters (İ and ı with i, the Kelvin sign with k,
# ſ with s); text containing one of them always runs the scans.
_SIGNAL_HINTS: tuple[tuple[str, ...], ...] = (
    ("traceback (most recent call last)",),
    ("exit",),
    ("error:", "exception:"),
    ("error:",),
    ("error",),
    ("http", "status", "error"),
    ("exception",),
    ("fail",),
    ("found",),
    ("unable",),
    ("cannot", "can't", "can not", "could not", "couldn't"),
)

_CASELESS_ALIASES = ("\u0130", "\u0131", "\u212a", "\u017f")

_CODE_BLOCK = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
# An AutoGen-style terminal result "Code output:" with nothing after it is an empty result.
_EMPTY_CODE_OUTPUT = re.compile(r"Code output:\s*\Z", re.IGNORECASE)
_NOTE_TOOL = re.compile(
    r"(?:think|thinking|reflect|reflection|scratchpad|take_?note|note_?to_?self)"
)
"""Tools whose call is the whole point and whose reply is empty by design (the "think" tool
an agent writes its reasoning into): an empty reply from one is not a failure."""

# Actors that report what happened rather than decide what to do.
_OUTPUT_KINDS = frozenset({StepKind.TOOL, StepKind.HUMAN, StepKind.SYSTEM})
_ACTING_KINDS = frozenset({StepKind.MESSAGE, StepKind.LLM, StepKind.HANDOFF})
_OUTPUT_AGENT_NAMES = frozenset({"human", "user", "system", "tool", "terminal"})


def _is_output_agent(agent: str) -> bool:
    name = normalise_agent(agent)
    return name in _OUTPUT_AGENT_NAMES or name.endswith("terminal")


def is_acting_step(step: Step) -> bool:
    """Whether an agent decided this step (as opposed to a tool, terminal or human reporting)."""
    return step.kind in _ACTING_KINDS and not _is_output_agent(step.agent)


def own_doing(steps: Sequence[Step]) -> list[bool]:
    """Which steps the agent they name answers for itself: its acting steps, and its tool
    calls when the trace records them under its name (OpenTelemetry puts a tool span
    under the span of the agent that called it, so the step's agent is the caller). A
    report under a tool's, terminal's or human's own name, or under a name that never
    acts in the run, is someone else's doing: it answers to the agent that acted
    before it."""
    acting_agents = {step.agent for step in steps if is_acting_step(step)}
    return [
        is_acting_step(step) or (step.kind is StepKind.TOOL and step.agent in acting_agents)
        for step in steps
    ]


def _observed_text(step: Step, task: str) -> str:
    text: str = step.content
    if step.tool_result:
        text = f"{text}\n{step.tool_result}"
    if step.error:
        text = f"{text}\n{step.error}"
    # Quoting the task is not an error the run produced.
    if task and len(task) > 20:
        text = text.replace(task, " ")
    if is_acting_step(step):
        # Code an agent writes (try/except, error handling) is a plan, not an observed error.
        text = _CODE_BLOCK.sub(" ", text)
    return text


def error_signals(step: Step, task: str = "") -> list[ErrorSignal]:
    """The error signals visible in one step, strongest first."""
    found: list[ErrorSignal] = []
    if step.status is StepStatus.ERROR or step.error:
        found.append(ErrorSignal("step status error", 1.0, (step.error or "")[:120]))
    text = _observed_text(step, task)
    lowered: str | None = text.lower()
    if not text.isascii() and any(map(text.__contains__, _CASELESS_ALIASES)):
        lowered = None
    for (label, strength, pattern), hints in zip(_TEXT_SIGNALS, _SIGNAL_HINTS, strict=True):
        if lowered is not None and not any(map(lowered.__contains__, hints)):
            continue
        match = pattern.search(text)
        if match:
            found.append(ErrorSignal(label, strength, around(text, match.start(), match.end())))
    if not is_acting_step(step):
        result = step.tool_result if step.tool_result is not None else step.content
        if step.kind is StepKind.TOOL and not result.strip():
            if not _NOTE_TOOL.fullmatch((step.tool_name or "").strip().lower()):
                found.append(ErrorSignal("empty tool result", 0.6))
        elif _EMPTY_CODE_OUTPUT.search(result.rstrip()):
            found.append(ErrorSignal("empty tool result", 0.6, "Code output: (empty)"))
    found.sort(key=lambda signal: -signal.strength)
    return found


def shown_errors(step: Step, task: str = "") -> list[ErrorSignal]:
    """The error signals of one step that are an error the run shows, strongest first:
    its status, a traceback, an error-shaped result; not a word of failure inside data a
    tool returned (`errors.shown`)."""
    return shown(step, error_signals(step, task), acting=is_acting_step(step))


def _responsible_step(steps: Sequence[Step], own: Sequence[bool], index: int) -> int | None:
    """The step answerable for step `index`: the nearest acting step at or before it; but
    a tool call under its caller's name (`own_doing`) is answered for by the caller's
    decision to make it (the caller's acting step right before its calls) when there is
    one, else by the call itself."""
    call: int | None = None
    for position in range(index, -1, -1):
        step = steps[position]
        if is_acting_step(step):
            if call is None or step.agent == steps[call].agent:
                return position
            return call
        if own[position]:
            if call is None:
                call = position
            elif step.agent != steps[call].agent:
                return call
    return call


def _without_error(
    trajectory: Trajectory, first_acting: int, last_acting: int
) -> tuple[int, str, float, str]:
    """When no step shows an error: the first agent step that contradicts the report it
    answers, else the first that states a figure nothing observed supports (provenance);
    else, in a run that never finished (its root span never arrived: metadata
    `unfinished`), the last acting step, the work stopped after it; else, said plainly to
    be a guess, the first acting step. (step, reason, confidence, rule)"""
    provenance = Provenance(trajectory.task)
    record_checks = RecordChecks(trajectory.task)
    made_up: tuple[int, str] | None = None
    for step in trajectory.steps:
        acting = is_acting_step(step)
        values = provenance.push(step, acting)
        finding = record_checks.push(step, acting=acting)
        if finding is not None:
            return (
                step.index,
                f"No step shows an error, but at step {step.index} {finding.said_by(step.agent)}.",
                0.35,
                finding.kind,
            )
        if values.contradicts:
            figures = ", ".join(values.unsupported[:3])
            reported = ", ".join(values.answered_figures[:3])
            return (
                step.index,
                f"No step shows an error, but at step {step.index} {step.agent} stated {figures}"
                f" right after {values.answered} {values.answered_verb} {reported}.",
                0.35,
                "contradicts-report",
            )
        if values.introduced and made_up is None:
            figures = ", ".join(values.introduced[:3])
            made_up = (
                step.index,
                f"No step shows an error, but at step {step.index} {step.agent} stated {figures},"
                " which no earlier tool output, user message or the task supports.",
            )
    if made_up is not None:
        return made_up[0], made_up[1], 0.25, "unsupported-figure"
    if trajectory.metadata.get("unfinished"):
        agent = trajectory.steps[last_acting].agent
        return (
            last_acting,
            f"No step shows an error, but the run never finished: its work stopped after"
            f" step {last_acting} of {agent} (its root span never arrived: the process"
            " crashed, was killed or hung).",
            0.15,
            "unfinished-last-acting-step",
        )
    return (
        first_acting,
        f"A guess: no step shows an error or a figure without support, so the run's first"
        f" agent decision, step {first_acting} ({trajectory.steps[first_acting].agent}), is"
        " blamed.",
        0.05,
        "fallback-first-acting-step",
    )


def _answerable_signals(
    trajectory: Trajectory, own: Sequence[bool], withheld: UserWithheld | None
) -> tuple[dict[int, tuple[ErrorSignal, int]], tuple[int, ErrorSignal, int, bool] | None]:
    """For each step answerable for an error the run shows, the strongest one and where
    it shows; and the run's first error it did not get past (answerable step, signal,
    where it shows, False): an error a later call of the same tool recovered
    (`errors.outcomes`) is no sign of what decided the run, so it is first (with True)
    only when every error was."""
    steps = trajectory.steps
    owned = [_owned_signal(trajectory, own, withheld, step) for step in steps]
    after = outcomes(steps, [item is not None for item in owned], list(map(is_acting_step, steps)))
    answerable: dict[int, tuple[ErrorSignal, int]] = {}
    first: tuple[int, ErrorSignal, int, bool] | None = None
    first_recovered: tuple[int, ErrorSignal, int, bool] | None = None
    for step, item, outcome in zip(steps, owned, after, strict=True):
        if item is None:
            continue
        owner, signal = item
        if owner not in answerable or answerable[owner][0].strength < signal.strength:
            answerable[owner] = (signal, step.index)
        recovered = outcome is not None and outcome.recovered and signal.label != _WITHHELD
        if first is None and not recovered:
            first = (owner, signal, step.index, False)
        if first_recovered is None and recovered:
            first_recovered = (owner, signal, step.index, True)
    return answerable, first if first is not None else first_recovered


_WITHHELD = "withheld by the simulated user"
_FIGURE_RULES = frozenset({
    "contradicts-report", "unsupported-figure", "contradicts-records", "misattributed-figure",
})  # fmt: skip
"""`_without_error`'s rules that rest on what the run's figures show."""
_RULE_BASIS = {"unfinished-last-acting-step": "unfinished", "fallback-first-acting-step": "guess"}
"""The evidence family (`Attribution.basis`) of `_without_error`'s other rules."""


def _owned_signal(
    trajectory: Trajectory, own: Sequence[bool], withheld: UserWithheld | None, step: Step
) -> tuple[int, ErrorSignal] | None:
    """The strongest error step `step` shows (`shown_errors`) and the step answerable
    for it."""
    if withheld is not None and step.index == withheld.step:
        # A simulated user's own doing: its turn, not the agent's before it.
        return step.index, ErrorSignal(_WITHHELD, 1.0, withheld.excerpt)
    signals = shown_errors(step, trajectory.task)
    if not signals:
        return None
    owner = _responsible_step(trajectory.steps, own, step.index)
    return None if owner is None else (owner, signals[0])


@register("first_error")
class FirstError:
    """Blame the first step whose content shows an error, moved back to the acting agent.

    Rules (fixed from the method description, not fitted to labelled data):

    * A step shows an error if its status is error or its text matches one of the
      error signals (traceback, non-zero exit code, `XError:`/`Error:`, HTTP 4xx/5xx,
      "exception", "failed", "not found", "unable to", "cannot"/"could not", or an
      empty tool result) as an error the run shows (`shown_errors`): in data a tool
      returned only an error-shaped result (the error at its top, a top-level `error`
      field), never a word inside log lines, search results or pages; in an agent's own
      words the words of failure only said of its own work. Code blocks inside an
      agent's own message and text quoted from the task are ignored: they are plans and
      inputs, not observations.
    * An error a later call of the same tool got past (`errors.outcomes`) is not the
      first error while one the run never recovered from shows; when every error was
      recovered, a step the figures show wrong (below) comes before it.
    * If that step is output of a tool, terminal or human, the blame moves to the
      nearest earlier acting step (message/LLM/handoff of a non-tool agent). Signals
      before the first acting step have no one to blame and are skipped.
    * A simulated user's turn that withheld an identifier its instructions give it, when
      the run never came by it afterwards (`simulated_user.withheld_by_user`), is a
      signal of its own, blamed on the user.
    * When no step shows an error, the evidence of figures (`provenance`): the first
      agent step that answers a tool's report with a figure of its own, repeating none of
      the report's; else the first that states a figure no observation supports; else, in
      a run that never finished (the sidecar gave up waiting for its root span), the last
      acting step, after which the work stopped. Only when there is none either, the
      first acting step, and the reason says it is a guess.

    Candidates are every acting step, ranked in three bands: the blamed step
    (0.7-1.0), other acting steps answerable for an error signal (0.3-0.7, by
    strength), acting steps with no signal (0-0.3, earlier first). Confidence is
    the signal strength halved — the rule is uncalibrated — (quartered for a recovered
    error), 0.35 / 0.25 for the figure evidence and 0.05 for the guess. `basis` names
    the evidence family (`error`, `tool-error`, `recovered-error`, `user-withheld`, a
    figure rule's, `unfinished`) or `guess`.
    """

    name = "first_error"
    cpu_bound = True
    """Pure computation: the sidecar runs it in a worker thread, off its event loop."""

    async def attribute(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
        if not trajectory.steps:
            return Attribution.failed(self.name, "the trajectory has no steps")
        own = own_doing(trajectory.steps)
        acting = [step.index for step, mine in zip(trajectory.steps, own, strict=True) if mine]
        if not acting:
            return Attribution.failed(self.name, "the trajectory has no acting agent step")

        withheld = withheld_by_user(trajectory)
        answerable, first = _answerable_signals(trajectory, own, withheld)
        figures = None
        if first is None or first[3]:
            figures = _without_error(trajectory, acting[0], acting[-1])
            if figures[3] in _FIGURE_RULES:
                first = None  # what a figure shows outweighs an error the run got past
        if first is not None:
            blamed, signal, seen_at, recovered = first
            words = (signal.label, signal.excerpt)
            reason = error_sentence(trajectory.steps, blamed, seen_at, *words) + "."
            confidence = 0.5 * signal.strength
            rule, basis = "first-error", "error" if seen_at == blamed else "tool-error"
            if recovered:
                reason += " The run got past it, as it did every error it showed."
                confidence, basis = 0.25 * signal.strength, "recovered-error"
            if withheld is not None and blamed == withheld.step:
                reason, rule = withheld.text(), "user-withheld"
                basis = rule
        else:
            assert figures is not None
            blamed, reason, confidence, rule = figures
            basis = _RULE_BASIS.get(rule, rule)

        ranked = acting if blamed in acting else sorted([*acting, blamed])
        candidates = self._rank(trajectory, ranked, answerable, blamed)
        return Attribution(
            method=self.name,
            agent=trajectory.steps[blamed].agent,
            step=blamed,
            reason=reason,
            confidence=confidence,
            candidates=candidates,
            used_ground_truth=False,
            llm_calls=0,
            basis=basis,
            details={"rule": rule, "error_steps": sorted(answerable)},
        )

    @staticmethod
    def _rank(
        trajectory: Trajectory,
        acting: list[int],
        answerable: dict[int, tuple[ErrorSignal, int]],
        blamed: int,
    ) -> tuple[Candidate, ...]:
        n = len(trajectory.steps)
        scored: list[Candidate] = []
        for index in acting:
            agent = trajectory.steps[index].agent
            if index in answerable:
                signal, seen_at = answerable[index]
                band = 0.7 if index == blamed else 0.3
                score = band + 0.3 * signal.strength
                evidence = f"{signal.label} at step {seen_at}"
                if signal.excerpt:
                    evidence += f": {signal.excerpt}"
            else:
                score = 0.7 + 0.3 * 1.0 if index == blamed else 0.3 * (1.0 - index / n)
                evidence = "no error signal" if index == blamed else ""
            scored.append(
                Candidate(step=index, agent=agent, score=round(score, 6), evidence=evidence)
            )
        scored.sort(key=lambda candidate: (-candidate.score, candidate.step))
        return tuple(scored)
