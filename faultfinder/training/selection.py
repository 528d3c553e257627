"""What training chooses from out-of-fold scores: agent rule, temperature, alarm threshold.

Each choice is judged on scores of models that did not see the runs judged
(`fitting.out_of_fold_scores`): the agent rule by per-run utility (`run_utilities`),
the softmax temperature by likelihood, the auditor's alarm threshold by first-alarm
hits, and a framework's own model against the pooled one by one standard error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from faultfinder.attributors.learned.blame import softmax
from faultfinder.attributors.learned.step_model import AgentRule
from faultfinder.attributors.model import normalise_agent
from faultfinder.training.runs import RunMatrix

__all__ = [
    "TEMPERATURES",
    "beats_by_one_standard_error",
    "choose_alarm_threshold",
    "choose_temperature",
    "first_alarm",
    "predicted_agent",
    "run_correct",
    "run_utilities",
]


def predicted_agent(run: RunMatrix, probabilities: Sequence[float], rule: str) -> str:
    if rule == AgentRule.AGENT_MASS:
        mass: dict[str, float] = {}
        for agent, p in zip(run.agents, probabilities, strict=True):
            mass[agent] = mass.get(agent, 0.0) + p
        return max(mass, key=lambda name: mass[name])
    top = max(range(len(probabilities)), key=lambda i: (probabilities[i], -i))
    return run.agents[top]


def run_correct(run: RunMatrix, scores: Sequence[float], rule: str) -> tuple[bool, bool]:
    """Whether the scores' top blameable step, and the agent `rule` names, are the gold ones."""
    p = softmax(scores, mask=run.blameable)
    top = max(range(len(p)), key=lambda i: (p[i], -i))
    agent = predicted_agent(run, p, rule)
    return top == run.gold_step, normalise_agent(agent) == normalise_agent(run.gold_agent)


def run_utilities(
    runs: Sequence[RunMatrix], scores: Sequence[Sequence[float]], rule: str
) -> list[float]:
    """Per run, the mean of step and agent correctness (0, ½ or 1): what training compares."""
    return [0.5 * sum(run_correct(run, s, rule)) for run, s in zip(runs, scores, strict=True)]


TEMPERATURES: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0)
"""Softmax temperatures tried for the conformal step distribution."""


def choose_temperature(runs: Sequence[RunMatrix], scores: Sequence[Sequence[float]]) -> float:
    """The temperature under which the gold steps are likeliest (ties: 1.0 first).

    Temperature scaling by likelihood, not by how many steps the calibrated sets drop:
    the conformal scores are calibrated on these same runs, and picking, among several
    temperatures, the one whose calibration quantiles happen to drop the most steps
    leaves sets that cover less than 1 − α on new runs (measured on Who&When, task-grouped
    5-fold CV over 10 seeds: 88.7 % at α = 0.1 that way, 90.1 % by likelihood). Only the
    shape of the distribution changes (the top step does not), so the step answer is
    unaffected.
    """
    best, best_nll = 1.0, math.inf
    for temperature in sorted(TEMPERATURES, key=lambda t: abs(math.log(t))):
        nll = 0.0
        for run, s in zip(runs, scores, strict=True):
            p = softmax(s, temperature, run.blameable)[run.gold_step]
            nll -= math.log(max(p, 1e-300))
        if nll < best_nll - 1e-9:
            best, best_nll = temperature, nll
    return best


def first_alarm(
    scores: Sequence[float], threshold: float, mask: Sequence[bool] | None = None
) -> int | None:
    """The first step whose prefix score exceeds `threshold` (among the steps `mask`
    keeps, see `learned.blameable`), or None."""
    return next(
        (i for i, s in enumerate(scores) if s > threshold and (mask is None or mask[i])), None
    )


def choose_alarm_threshold(runs: Sequence[RunMatrix], scores: Sequence[Sequence[float]]) -> float:
    """The threshold whose first alarms hit the gold step in the most runs (ties: higher)."""
    candidates = sorted({round(s, 9) for run_scores in scores for s in run_scores})
    best, best_hits = math.inf, -1
    # Walk down from the highest threshold; evaluate a spread of candidates for speed.
    stride = max(1, len(candidates) // 400)
    for threshold in reversed(candidates[::stride]):
        threshold -= 1e-9
        hits = sum(
            first_alarm(s, threshold, run.alarmable or run.blameable) == run.gold_step
            for run, s in zip(runs, scores, strict=True)
        )
        if hits > best_hits:
            best, best_hits = threshold, hits
    return best


def beats_by_one_standard_error(gains: Sequence[float]) -> bool:
    """Whether paired per-run gains have a mean above one standard error of that mean.

    A framework's own model replaces the pooled one only then (the one-standard-error
    rule: keep the model backed by more data unless the other is better by more than
    the noise of the comparison). With a few dozen runs per framework, inner-CV
    differences of a few points are within that noise, and choosing by the raw mean
    picks the worse model about as often as the better one.
    """
    n = len(gains)
    if n < 2:
        return False
    mean = sum(gains) / n
    variance = sum((g - mean) ** 2 for g in gains) / (n - 1)
    return mean > math.sqrt(variance / n)
