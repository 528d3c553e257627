"""The feature matrix of a whole trajectory (`step_features`): one row per step.

The prefix-safe features come from `PrefixScanner`; the features that look at the
steps after a step (what follows it, the run's length and final answer, the agents'
shares) are added from the whole run, then each row gets its context columns.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from faultfinder.attributors.learned.features.columns import STEP_FEATURES
from faultfinder.attributors.learned.features.prefix import PrefixScanner
from faultfinder.attributors.learned.features.text import (
    AnswerMatcher,
    StepFacts,
    extract_final_answer,
    normalise_text,
    numbers_in,
)
from faultfinder.attributors.model import Trajectory
from faultfinder.attributors.provenance import ValueFacts

__all__ = ["step_features"]

_STEP_NAMES = tuple(f.name for f in STEP_FEATURES)


def step_features(
    trajectory: Trajectory, *, use_ground_truth: bool = True, prefix_only: bool = False
) -> list[list[float]]:
    """One row per step, columns in the order of `feature_names(prefix_only)`.

    With `prefix_only`, only prefix-safe features are computed and row i is the same
    whatever steps follow step i (the auditor's guarantee). Without `use_ground_truth`
    the ground-truth features are 0.
    """
    return run_features(trajectory, use_ground_truth=use_ground_truth, prefix_only=prefix_only).rows


@dataclass(frozen=True)
class RunFeatures:
    """The feature matrix of a run and what it was read from."""

    rows: list[list[float]]
    """One row per step, in the order of `feature_names(prefix_only)`."""
    named: list[dict[str, float]]
    """Each step's own features by name (no context columns)."""
    scanner: PrefixScanner
    """The step-by-step reading: each step's `facts` and `values` (provenance)."""


def run_features(
    trajectory: Trajectory, *, use_ground_truth: bool = True, prefix_only: bool = False
) -> RunFeatures:
    """`step_features`, with the per-step facts behind them (for evidence in words)."""
    scanner = PrefixScanner(
        trajectory.task, trajectory.ground_truth, use_ground_truth=use_ground_truth
    )
    for step in trajectory.steps:
        scanner.push(step)
    if prefix_only:
        rows = [scanner.prefix_row(i) for i in range(len(scanner))]
        return RunFeatures(rows, [dict(row) for row in scanner.rows], scanner)
    named = [dict(row) for row in scanner.rows]
    _add_whole_run_features(trajectory, scanner.facts, scanner.values, named, use_ground_truth)
    own = [[row[name] for name in _STEP_NAMES] for row in named]
    return RunFeatures(_with_context(own), named, scanner)


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
    facts: Sequence[StepFacts],
    values: Sequence[ValueFacts],
    rows: list[dict[str, float]],
    use_ground_truth: bool,
) -> None:
    n = len(facts)
    owner = _answerable_steps(facts)
    error_after, contradiction_after, first_blamed = _errors_after(facts, rows, owner)
    stalled_after = _ledger_stalled_after(facts)
    criticised = _criticised_next(facts)
    first_final = _final_answer_first_mention(trajectory, facts, use_ground_truth)
    origin = final_value_origin(trajectory, values, facts, use_ground_truth)
    claimant = final_answer_first_claim(trajectory, facts, use_ground_truth)
    agents = _AgentShares.of(facts, owner)

    for i, row in enumerate(rows):
        agent = facts[i].agent
        row["relative_position"] = i / (n - 1) if n > 1 else 0.0
        row["log_steps_total"] = math.log1p(n)
        row["log_steps_to_end"] = math.log1p(n - 1 - i)
        row["agent_last_turn"] = float(agents.last_turn[agent] == i)
        row["error_after"] = error_after[i]
        row["first_error_blame"] = float(i == first_blamed)
        row["ledger_stalled_after"] = stalled_after[i]
        row["criticised_next"] = criticised[i]
        row["contradiction_after"] = contradiction_after[i]
        row["final_answer_first_mention"] = float(i == first_final)
        row["final_value_origin"] = float(i == origin)
        row["final_answer_first_claim"] = float(i == claimant)
        row["agent_share"] = agents.counts[agent] / n
        row["agent_error_share"] = (
            agents.error_counts.get(agent, 0) / agents.total_errors if agents.total_errors else 0.0
        )
        row["agent_acting_turns"] = math.log1p(agents.acting_counts[agent])


def _answerable_steps(facts: Sequence[StepFacts]) -> list[int | None]:
    """The acting step answerable for each step: itself or the nearest earlier acting
    step (None before the first)."""
    owner: list[int | None] = []
    current: int | None = None
    for i, fact in enumerate(facts):
        if fact.acting:
            current = i
        owner.append(current)
    return owner


def _errors_after(
    facts: Sequence[StepFacts], rows: Sequence[dict[str, float]], owner: Sequence[int | None]
) -> tuple[list[float], list[float], int | None]:
    """Per acting step, the worst error and whether a ground-truth contradiction shows at
    the later steps it answers for; and the step blamed for the first error."""
    n = len(facts)
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
    return error_after, contradiction_after, first_blamed


def _ledger_stalled_after(facts: Sequence[StepFacts]) -> list[float]:
    """A ledger that follows the step before its agent acts again judges that step."""
    n = len(facts)
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
    return stalled_after


def _criticised_next(facts: Sequence[StepFacts]) -> list[float]:
    """The criticism in the next acting step by another agent, which reacts to this one."""
    n = len(facts)
    criticised = [0.0] * n
    next_reaction: tuple[str, float] | None = None
    for i in range(n - 1, -1, -1):
        if next_reaction is not None and next_reaction[0] != facts[i].agent:
            criticised[i] = next_reaction[1]
        if facts[i].acting:
            next_reaction = (facts[i].agent, facts[i].criticism)
    return criticised


def _final_answer_first_mention(
    trajectory: Trajectory, facts: Sequence[StepFacts], use_ground_truth: bool
) -> int | None:
    """The first step that mentions a final answer differing from the ground truth (by
    its figure, or its words when short: `_answer_key`)."""
    key = _answer_key(trajectory, use_ground_truth)
    if key is None:
        return None
    return next((i for i, f in enumerate(facts) if key.found_in(f.numbers, f.normalised)), None)


_SHORT_ANSWER_WORDS = 6
"""A final answer without figures is matched by its words only when it is this short: a
long answer is a sentence, and its words say nothing about where its value came from."""


def _answer_key(trajectory: Trajectory, use_ground_truth: bool) -> AnswerMatcher | None:
    """What identifies the run's final answer in a step: its last figure (years aside),
    else its words when the answer is short; None when there is no final answer or it
    equals the ground truth (with ground truth allowed)."""
    answer = extract_final_answer(trajectory)
    if answer is None or not answer.strip():
        return None
    figures = [
        value for value in numbers_in(answer) if not (value.is_integer() and 1900 <= value <= 2100)
    ]
    tokens = [t for t in _NUMBER_TOKEN.findall(answer) if _figure(t) in figures]
    key: AnswerMatcher | None
    if tokens:
        key = AnswerMatcher(_figure(tokens[-1]), normalise_text(tokens[-1]))
    else:
        key = AnswerMatcher.of(answer)
    if key is None or (key.number is None and len(key.words.split()) > _SHORT_ANSWER_WORDS):
        return None
    gt = AnswerMatcher.of(trajectory.ground_truth) if use_ground_truth else None
    if gt is not None and (
        key.words == gt.words or (key.number is not None and key.number == gt.number)
    ):
        return None
    return key


def final_value_origin(
    trajectory: Trajectory,
    values: Sequence[ValueFacts],
    facts: Sequence[StepFacts],
    use_ground_truth: bool,
) -> int | None:
    """The first agent step that states the run's final answer (`_answer_key`), when
    nothing observed before it supports that answer: the step that made the answer up.
    None when the answer is supported where it first appears, or there is no key."""
    key = _answer_key(trajectory, use_ground_truth)
    if key is None:
        return None
    for i, fact in enumerate(facts):
        if not fact.acting or not key.found_in(fact.numbers, fact.normalised):
            continue
        if key.number is not None:
            unsupported = {_figure(token) for token in values[i].unsupported}
            return i if key.number in unsupported else None
        observed = " ".join(f.normalised for f in facts[:i] if not f.acting)
        return None if f" {key.words} " in f" {observed} " else i
    return None


def final_answer_first_claim(
    trajectory: Trajectory, facts: Sequence[StepFacts], use_ground_truth: bool
) -> int | None:
    """The first agent step that states the run's final answer (`_answer_key`)."""
    key = _answer_key(trajectory, use_ground_truth)
    if key is None:
        return None
    return next(
        (
            i
            for i, fact in enumerate(facts)
            if fact.acting and key.found_in(fact.numbers, fact.normalised)
        ),
        None,
    )


_NUMBER_TOKEN = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])")


def _figure(token: str) -> float | None:
    try:
        return float(token.replace(",", ""))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class _AgentShares:
    """Per agent: its steps, acting steps, errors blamed on it and its last step."""

    counts: dict[str, int]
    acting_counts: dict[str, int]
    error_counts: dict[str, int]
    last_turn: dict[str, int]
    total_errors: int

    @classmethod
    def of(cls, facts: Sequence[StepFacts], owner: Sequence[int | None]) -> _AgentShares:
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
        return cls(counts, acting_counts, error_counts, last_turn, sum(error_counts.values()))
