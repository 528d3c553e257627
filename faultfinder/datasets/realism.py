"""How much a labelled set looks like real failures: `faultfinder dataset stats`.

A set of failures made on purpose can carry its maker's fingerprints: labels always in
the first turns, runs with nothing misleading before the flaw, one agent turn. A method
scored on such a set learns where its labels sit, not what went wrong. These statistics
put any labelled set beside a set people labelled (Who&When, τ-bench), so a corpus's
datasheet can show where it differs:

- shape: steps and acting agents per run, the share of runs with at least 15 steps and
  at least 3 agents, and with a single agent turn;
- where the label sits: its position relative to the run (0 = the first step, 1 = the
  last), and the share of labels among the first three agent turns;
- what comes before it (distractors): the share of runs that show an error before the
  labelled step, a recovered one (the same tool later succeeded), an apology or retry in
  an agent's words, and a figure stated by an agent that nothing earlier shows.

The rules are the attributors' own readings (`errors.py`, `provenance.py`); nothing here
is fitted to any set.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from faultfinder.attributors.errors import outcomes
from faultfinder.attributors.heuristics import is_acting_step, shown_errors
from faultfinder.attributors.model import Trajectory
from faultfinder.attributors.provenance import figures_in, same_figure
from faultfinder.datasets.records import BenchmarkRecord

__all__ = ["RunShape", "SetStats", "run_shape", "set_stats"]

_APOLOGY = re.compile(
    r"\b(sorry|apolog\w*|my (?:mistake|bad)|i was wrong|let me (?:try|check) again|"
    r"retry(?:ing)?|try again)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class RunShape:
    """One labelled run, as the statistics read it."""

    steps: int
    agents: int
    agent_turns: int
    label_position: float
    """The labelled step's index over the last index (0 for a one-step run)."""
    label_turn: int | None
    """How many agent turns come before the labelled step's (None: not an agent turn)."""
    error_before: bool
    recovered_error_before: bool
    apology_before: bool
    unsupported_figure_before: bool


def run_shape(trajectory: Trajectory, label_step: int) -> RunShape:
    """The shape of one run whose failure is labelled at `label_step`."""
    steps = trajectory.steps
    acting = [is_acting_step(step) for step in steps]
    erring = [bool(shown_errors(step, trajectory.task)) for step in steps]
    found = outcomes(steps, erring, acting)
    before = range(min(label_step, len(steps)))
    seen = list(figures_in(trajectory.task))
    unsupported = False
    for i in before:
        figures = figures_in(steps[i].content)
        if acting[i] and any(not any(same_figure(value, old) for old in seen) for value in figures):
            unsupported = True
        seen.extend(figures)
    turns_before = sum(acting[:label_step])
    return RunShape(
        steps=len(steps),
        agents=len({step.agent for step, mine in zip(steps, acting, strict=True) if mine}),
        agent_turns=sum(acting),
        label_position=label_step / (len(steps) - 1) if len(steps) > 1 else 0.0,
        label_turn=turns_before if label_step < len(steps) and acting[label_step] else None,
        error_before=any(erring[i] for i in before),
        recovered_error_before=any(
            (outcome := found[i]) is not None and outcome.recovered is not None for i in before
        ),
        apology_before=any(acting[i] and _APOLOGY.search(steps[i].content) for i in before),
        unsupported_figure_before=unsupported,
    )


def _share(flags: Iterable[bool]) -> float:
    values = list(flags)
    return round(100 * sum(values) / len(values), 1) if values else 0.0


def _quartiles(values: Sequence[float]) -> list[float]:
    if len(values) < 2:
        return [round(float(v), 2) for v in values] * 3 if values else []
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return [round(q1, 2), round(q2, 2), round(q3, 2)]


@dataclass
class SetStats:
    """The statistics of one set (a dataset's subset)."""

    name: str
    shapes: list[RunShape] = field(default_factory=list)
    modes: set[str] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        shapes = self.shapes
        return {
            "set": self.name,
            "runs": len(shapes),
            "steps_quartiles": _quartiles([s.steps for s in shapes]),
            "agents_median": statistics.median(s.agents for s in shapes) if shapes else 0,
            "pct_15_steps": _share(s.steps >= 15 for s in shapes),
            "pct_3_agents": _share(s.agents >= 3 for s in shapes),
            "pct_one_agent_turn": _share(s.agent_turns == 1 for s in shapes),
            "label_position_quartiles": _quartiles([s.label_position for s in shapes]),
            "pct_label_in_first_3_turns": _share(
                s.label_turn is not None and s.label_turn < 3 for s in shapes
            ),
            "pct_error_before_label": _share(s.error_before for s in shapes),
            "pct_recovered_error_before_label": _share(s.recovered_error_before for s in shapes),
            "pct_apology_before_label": _share(s.apology_before for s in shapes),
            "pct_unsupported_figure_before_label": _share(
                s.unsupported_figure_before for s in shapes
            ),
            "pct_any_distractor_before_label": _share(
                s.error_before or s.apology_before or s.unsupported_figure_before for s in shapes
            ),
            "modes": len(self.modes),
        }


def set_stats(records: Iterable[BenchmarkRecord], name: str) -> list[SetStats]:
    """The statistics of each subset of `records` (named `name/subset`) and of all of
    them together (named `name`), in that order."""
    everything = SetStats(name)
    subsets: dict[str, SetStats] = {}
    for record in records:
        shape = run_shape(record.trajectory, record.gold.step)
        part = subsets.setdefault(record.subset, SetStats(f"{name}/{record.subset}"))
        for target in (everything, part):
            target.shapes.append(shape)
            if record.gold.mode:
                target.modes.add(record.gold.mode)
    return [*subsets.values(), everything] if len(subsets) > 1 else [everything]
