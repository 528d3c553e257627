"""The prefix-safe step features, one step at a time (`PrefixScanner`).

The row of step i depends on steps 0..i only (and the task and the ground truth), so the
online auditor scores a run while it streams in, and the whole-run features of
`features.matrix` start from these rows.
"""

from __future__ import annotations

import math

from faultfinder.attributors.learned.features.columns import STEP_FEATURES
from faultfinder.attributors.learned.features.text import (
    AnswerMatcher,
    StepFacts,
    apology,
    code_blocks,
    handoff_target,
    hedging,
    normalise_text,
    numbers_in,
    step_facts,
    terminates,
    verification,
)
from faultfinder.attributors.model import Step, StepKind
from faultfinder.attributors.provenance import Provenance, ValueFacts

__all__ = ["EVIDENCE_FEATURES", "PrefixScanner", "shows_evidence"]

EVIDENCE_FEATURES = (
    "error_in_step", "contradicts_report", "introduces_unsupported", "unsupported_argument",
    "first_numbers_contradict_gt", "hedging", "apology",
)  # fmt: skip
"""Prefix-safe features that say what a step shows (an error, a figure or a name nothing
observed supports, a contradiction, invented data, giving up), not where it sits."""


def shows_evidence(row: dict[str, float]) -> bool:
    """Whether a step's own prefix-safe features show any evidence of an error
    (`EVIDENCE_FEATURES`, or near-repetition of the agent's recent steps)."""
    return (
        any(row.get(name, 0.0) > 0 for name in EVIDENCE_FEATURES)
        or row.get("loop_count", 0.0) > 0
        or row.get("repetition", 0.0) >= 0.9
    )


_REPEAT_WINDOW = 5
# Bounds the quadratic cost of loop detection on long runs.
_LOOP_WINDOW = 20
_LOOP_SIMILARITY = 0.8  # 4/5, which `_may_loop` relies on


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
        self._gt = AnswerMatcher.of(ground_truth) if use_ground_truth else None
        self._task_words = frozenset(normalise_text(task).split())
        self._task_numbers = numbers_in(task)
        self._seen_numbers: set[float] = set(self._task_numbers)
        self._seen_words: set[str] = set(self._task_words)
        self.facts: list[StepFacts] = []
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
        self._provenance = Provenance(task)
        self.values: list[ValueFacts] = []
        """Per step: the figures it states without support (`provenance`)."""
        # Prefix rows with their context columns, built as they are asked for.
        self._prefix_rows: list[list[float]] = []
        self._highest_so_far: list[float] = [0.0] * len(_PREFIX_STEP_NAMES)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def uses_ground_truth(self) -> bool:
        """Whether a usable ground truth was given and may be used."""
        return self._gt is not None

    def push(self, step: Step) -> dict[str, float]:
        """Add the next step (its index must equal the number of steps pushed so far)."""
        i = len(self.rows)
        if step.index != i:
            raise ValueError(f"expected step {i} next, got step {step.index}")
        fact, lowered = step_facts(step, self.task)
        values = self._provenance.push(step, fact.acting)
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
        target = handoff_target(step)
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
            "code_blocks": code_blocks(step.content),
            "task_overlap": (
                len(self._task_words & fact.words) / len(self._task_words)
                if self._task_words
                else 0.0
            ),
            "new_numbers": math.log1p(len(fact.numbers - self._seen_numbers)),
            "new_words": (
                len(fact.words - self._seen_words) / len(fact.words) if fact.words else 0.0
            ),
            "hedging": hedging(lowered, fact.words),
            "apology": apology(lowered, fact.words),
            "verification": verification(lowered),
            "terminates": terminates(lowered),
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
            "unsupported_values": math.log1p(len(values.unsupported)),
            "introduces_unsupported": float(bool(values.introduced)),
            "contradicts_report": float(values.contradicts),
            "unsupported_argument": float(bool(values.unsupported_arguments)),
            "argument_outside_task": float(values.outside_task),
        }
        self.values.append(values)
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


_PREFIX_STEP_NAMES = tuple(f.name for f in STEP_FEATURES if f.prefix_safe)
