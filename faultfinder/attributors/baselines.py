"""Trivial baselines every accuracy figure is quoted beside.

- `last_agent_step`: the run's last step an agent decided (the step a reader of a failed
  run looks at first).
- `cascade`: the untrained rule cascade — the first error the run shows (blamed on the
  agent that made the failing call), else the first agent step stating a figure that no
  earlier step nor the task shows, else the first agent step.

Neither is trained or tuned on any set: a method that does not beat them on a set has
learned nothing that set rewards beyond where its labels sit. Their answers say which rule
chose the step; the position rule's answer is marked as a guess.
"""

from __future__ import annotations

from collections.abc import Sequence

from faultfinder.attributors.base import AttributeOptions, register
from faultfinder.attributors.heuristics import is_acting_step, shown_errors
from faultfinder.attributors.learned.blame import callers
from faultfinder.attributors.model import Attribution, Step, Trajectory
from faultfinder.attributors.provenance import figures_in, same_figure

__all__ = ["CascadeAttributor", "LastAgentStepAttributor", "cascade_choice"]

_FIGURE_BASIS = "unsupported-figure"
_ERROR_BASIS = "error"
_GUESS = "guess"


@register("last_agent_step")
class LastAgentStepAttributor:
    """The last step an agent decided, else the last step."""

    name = "last_agent_step"
    calls_model = False

    async def attribute(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
        steps = trajectory.steps
        if not steps:
            return Attribution.failed(self.name, "the trajectory has no steps")
        acting = [i for i, step in enumerate(steps) if is_acting_step(step)]
        chosen = acting[-1] if acting else len(steps) - 1
        return Attribution(
            method=self.name,
            agent=steps[chosen].agent,
            step=chosen,
            reason="the run's last agent step (baseline)",
            basis=_GUESS,
        )


def cascade_choice(trajectory: Trajectory) -> tuple[int, str, str] | None:
    """The cascade's step, its basis and a sentence saying which rule chose it (see the
    module's docstring); None for a run without steps."""
    steps = trajectory.steps
    if not steps:
        return None
    acting = [is_acting_step(step) for step in steps]
    caller = callers(steps)
    for i, step in enumerate(steps):
        signals = shown_errors(step, trajectory.task)
        if signals:
            owner = caller[i]
            return (
                i if owner is None else owner,
                _ERROR_BASIS,
                f"the first error the run shows: {signals[0].label}",
            )
    seen = list(figures_in(trajectory.task))
    for i, step in enumerate(steps):
        figures = figures_in(step.content)
        if acting[i]:
            new = [text for value, text in figures.items() if not _shown(value, seen)]
            if new:
                return i, _FIGURE_BASIS, f"the first figure no earlier step shows: {new[0]}"
        seen.extend(figures)
    first = next((i for i, mine in enumerate(acting) if mine), 0)
    return first, _GUESS, "the run's first agent step (baseline: nothing else pointed anywhere)"


def _shown(value: float, seen: Sequence[float]) -> bool:
    return any(same_figure(value, earlier) for earlier in seen)


@register("cascade")
class CascadeAttributor:
    """The untrained rule cascade (see the module's docstring)."""

    name = "cascade"
    calls_model = False

    async def attribute(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
        choice = cascade_choice(trajectory)
        if choice is None:
            return Attribution.failed(self.name, "the trajectory has no steps")
        step, basis, reason = choice
        chosen: Step = trajectory.steps[step]
        return Attribution(
            method=self.name, agent=chosen.agent, step=step, reason=reason, basis=basis
        )
