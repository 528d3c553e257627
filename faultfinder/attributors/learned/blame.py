"""Which steps and agents a learned attribution may blame, and step scores as probabilities.

Steps that are not an agent's doing (the task giver's turns, system prompts and
framework bookkeeping: `StepKind.HUMAN` / `StepKind.SYSTEM`) get no probability, so
they are never blamed, never in the agent mass and never alarmed on (`blameable`); a
tool's or human's report answers to the agent that acted before it (`answerable_agents`),
a tool call recorded under its caller's name to that caller (`callers`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from faultfinder.attributors.heuristics import is_acting_step, own_doing
from faultfinder.attributors.model import Step, StepKind, Trajectory

__all__ = [
    "agent_scores",
    "answerable_agents",
    "blameable",
    "blameable_agents",
    "callers",
    "can_be_blamed",
    "softmax",
]


_NOT_BLAMED_KINDS = frozenset({StepKind.HUMAN, StepKind.SYSTEM})


def blameable(steps: Sequence[Step], participants: Collection[str] = ()) -> list[bool]:
    """Which steps the learned scorer may blame: every step an agent, a tool or a handoff
    produced; not the task giver's turns nor system prompts and bookkeeping, which are
    never the decisive mistake of the system (no Who&When or Who&When Pro label points at
    one). A user who is one of the system's `participants` (a simulated user named in the
    run's roster) may be blamed for its own turns. A run made only of steps that cannot be
    blamed keeps them all, so there is always a candidate."""
    mask = [can_be_blamed(step, participants) for step in steps]
    return mask if any(mask) else [True] * len(mask)


def can_be_blamed(step: Step, participants: Collection[str] = ()) -> bool:
    """Whether `step` is an agent's, tool's or handoff's doing, or a participating
    user's turn (see `blameable`)."""
    if step.kind is StepKind.HUMAN:
        return step.agent in participants
    return step.kind not in _NOT_BLAMED_KINDS


def answerable_agents(steps: Sequence[Step], participants: Collection[str] = ()) -> list[str]:
    """The agent that answers for each step: its own agent where the step is its own
    doing (an acting step, or a tool call recorded under the caller's name:
    `heuristics.own_doing`); for a report under a tool's, terminal's or human's name, the
    agent of the nearest earlier such step (the one that called the tool), as
    `first_error` blames it; the step's own agent where no agent acted before it."""
    answerable: list[str] = []
    actor: str | None = None
    for step, mine in zip(steps, own_doing(steps), strict=True):
        if step.kind is StepKind.HUMAN and step.agent in participants:
            answerable.append(step.agent)
            continue
        if mine:
            actor = step.agent
        answerable.append(actor if actor is not None else step.agent)
    return answerable


def callers(steps: Sequence[Step]) -> list[int | None]:
    """For each step, the acting step whose agent made it: an acting step itself; a tool
    call recorded under the name of an agent that acts in the run (`heuristics.own_doing`),
    that agent's latest earlier acting step, else the call itself (the agent that made a
    call is the one the step records, not whoever spoke last); any other report, the
    latest earlier acting step (None before any)."""
    found: list[int | None] = []
    latest: int | None = None
    latest_of: dict[str, int] = {}
    for i, (step, mine) in enumerate(zip(steps, own_doing(steps), strict=True)):
        if is_acting_step(step):
            latest = latest_of[step.agent] = i
            found.append(i)
        elif mine:
            found.append(latest_of.get(step.agent, i))
        else:
            found.append(latest)
    return found


def blameable_agents(trajectory: Trajectory) -> tuple[str, ...]:
    """The agents an attribution may name: those answering for a blameable step (in order
    of first appearance), then the declared team members that never acted in this run.
    Never the task giver or the system prompt's author, nor a tool whose reports answer
    to the agent that called it."""
    steps = trajectory.steps
    roster = trajectory.declared_roster
    acting = (
        agent
        for agent, ok in zip(
            answerable_agents(steps, roster), blameable(steps, roster), strict=True
        )
        if ok
    )
    return tuple(dict.fromkeys((*acting, *trajectory.declared_roster)))


def softmax(
    scores: Sequence[float], temperature: float = 1.0, mask: Sequence[bool] | None = None
) -> list[float]:
    """Scores → probabilities summing to 1 (numerically stable); where `mask` is given,
    the steps it marks False get probability 0 (it must keep at least one step)."""
    if not scores:
        return []
    if mask is not None:
        if len(mask) != len(scores):
            raise ValueError(f"mask has {len(mask)} entries for {len(scores)} scores")
        kept = softmax([s for s, keep in zip(scores, mask, strict=True) if keep], temperature)
        if not kept:
            raise ValueError("the mask keeps no step")
        values = iter(kept)
        return [next(values) if keep else 0.0 for keep in mask]
    t = temperature if temperature > 0 else 1.0
    top = max(scores)
    weights = [math.exp((s - top) / t) for s in scores]
    total = sum(weights)
    return [w / total for w in weights]


def agent_scores(agents: Sequence[str], probabilities: Sequence[float]) -> dict[str, float]:
    """Probability mass per agent (agents in order of first appearance)."""
    mass: dict[str, float] = {}
    for agent, p in zip(agents, probabilities, strict=True):
        mass[agent] = mass.get(agent, 0.0) + p
    return mass
