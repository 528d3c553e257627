"""Score attributions against gold labels and aggregate accuracies and costs per subset.

Exact scoring follows ATTRIBUTORS.md (normalised agent match, 0-based step match, ±k
tolerance); the original Who&When `evaluate.py` substring rule is kept apart as
"official-script" numbers. An accuracy's uncertainty is its Wilson score interval, and
whether two scorings of the same records differ beyond noise is an exact McNemar test on
the records only one of them got right. Pure functions: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from faultfinder.attributors.model import Attribution, AttributionStatus, normalise_agent

__all__ = [
    "DEFAULT_TOLERANCES",
    "OVERALL",
    "RandomExpectation",
    "RecordScore",
    "ScoredRecord",
    "SubsetScore",
    "aggregate",
    "mcnemar_exact_p",
    "official_agent_match",
    "official_step_match",
    "random_expectation",
    "score_attribution",
    "spread",
    "wilson_interval",
]

DEFAULT_TOLERANCES: tuple[int, ...] = (1, 3, 5)
OVERALL = "overall"
"""The aggregate over every subset."""


@dataclass(frozen=True)
class RecordScore:
    """How one attribution fares against one gold label."""

    agent: bool
    """Exact agent match after `normalise_agent`."""
    step: bool
    """Exact 0-based step match."""
    step_within: Mapping[int, bool]
    """k -> |predicted step - gold step| <= k."""
    official_agent: bool
    """Who&When `evaluate.py`: gold agent is a case-sensitive substring of the prediction."""
    official_step: bool
    """Who&When `evaluate.py`: str(gold step) is a substring of str(predicted step)."""
    failed: bool
    """The attribution failed or named no agent/step; every flag above is then False."""

    @property
    def agent_and_step(self) -> bool:
        return self.agent and self.step

    def as_dict(self) -> dict[str, Any]:
        flags: dict[str, Any] = {"agent": self.agent, "step": self.step}
        flags.update({f"step_pm{k}": hit for k, hit in sorted(self.step_within.items())})
        flags["agent_and_step"] = self.agent_and_step
        flags["official_agent"] = self.official_agent
        flags["official_step"] = self.official_step
        flags["failed"] = self.failed
        return flags


def official_agent_match(gold_agent: str, predicted_agent: str) -> bool:
    """The original script's agent rule, bug-compatible: case-sensitive substring."""
    return str(gold_agent) in str(predicted_agent)


def official_step_match(gold_step: int | str, predicted_step: int | str) -> bool:
    """The original script's step rule, bug-compatible: gold "1" also matches "12"."""
    return str(gold_step) in str(predicted_step)


def score_attribution(
    attribution: Attribution | None,
    gold_agent: str,
    gold_step: int,
    tolerances: Sequence[int] = DEFAULT_TOLERANCES,
) -> RecordScore:
    """Score one attribution; a missing or failed attribution is wrong on every count."""
    if (
        attribution is None
        or attribution.status is AttributionStatus.FAILED
        or attribution.agent is None
        or attribution.step is None
    ):
        return RecordScore(
            agent=False,
            step=False,
            step_within={k: False for k in tolerances},
            official_agent=False,
            official_step=False,
            failed=True,
        )
    distance = abs(attribution.step - gold_step)
    return RecordScore(
        agent=normalise_agent(attribution.agent) == normalise_agent(gold_agent),
        step=distance == 0,
        step_within={k: distance <= k for k in tolerances},
        official_agent=official_agent_match(gold_agent, attribution.agent),
        official_step=official_step_match(gold_step, attribution.step),
        failed=False,
    )


@dataclass(frozen=True)
class RandomExpectation:
    """Expected accuracy of the uniform random baseline on one record."""

    agent: float
    step: float


def random_expectation(
    agents: Sequence[str], n_steps: int, gold_agent: str, gold_step: int
) -> RandomExpectation:
    """P(uniform agent is right) and P(uniform step is right) for one record.

    With the gold agent among the agents this is 1/#agents and 1/#steps; a gold label
    the random choice cannot reach contributes 0.
    """
    distinct = list(dict.fromkeys(agents))
    agent_p = 0.0
    if distinct:
        hits = sum(normalise_agent(a) == normalise_agent(gold_agent) for a in distinct)
        agent_p = hits / len(distinct)
    step_p = 1.0 / n_steps if n_steps > 0 and 0 <= gold_step < n_steps else 0.0
    return RandomExpectation(agent=agent_p, step=step_p)


@dataclass(frozen=True)
class ScoredRecord:
    """One record's score together with what the attribution cost."""

    subset: str
    score: RecordScore
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0


@dataclass(frozen=True)
class SubsetScore:
    """Accuracies (fractions in [0, 1]) and mean per-record costs over a set of records."""

    n: int
    accuracy: dict[str, float]
    failed: int
    mean_llm_calls: float
    mean_prompt_tokens: float
    mean_completion_tokens: float
    mean_latency_s: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "failed": self.failed,
            "accuracy": dict(self.accuracy),
            "mean_llm_calls": self.mean_llm_calls,
            "mean_prompt_tokens": self.mean_prompt_tokens,
            "mean_completion_tokens": self.mean_completion_tokens,
            "mean_latency_s": self.mean_latency_s,
        }


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0


def _subset_score(records: Sequence[ScoredRecord]) -> SubsetScore:
    flags = [r.score.as_dict() for r in records]
    metric_names = [name for name in (flags[0] if flags else {}) if name != "failed"]
    return SubsetScore(
        n=len(records),
        accuracy={name: _mean(float(f[name]) for f in flags) for name in metric_names},
        failed=sum(r.score.failed for r in records),
        mean_llm_calls=_mean(r.llm_calls for r in records),
        mean_prompt_tokens=_mean(r.prompt_tokens for r in records),
        mean_completion_tokens=_mean(r.completion_tokens for r in records),
        mean_latency_s=_mean(r.latency_s for r in records),
    )


def aggregate(records: Sequence[ScoredRecord]) -> dict[str, SubsetScore]:
    """Scores per subset (sorted by name) plus `OVERALL`; the denominator is every record."""
    by_subset: dict[str, list[ScoredRecord]] = {}
    for record in records:
        by_subset.setdefault(record.subset, []).append(record)
    result = {name: _subset_score(by_subset[name]) for name in sorted(by_subset)}
    result[OVERALL] = _subset_score(records)
    return result


def spread(values: Sequence[float]) -> dict[str, float]:
    """Mean, sample standard deviation (0 for one value), min and max of repeated measurements."""
    if not values:
        return {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0}
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return {"mean": mean, "std": math.sqrt(var), "min": min(values), "max": max(values)}


def spread_percent(metric: Mapping[str, Any]) -> str:
    """A share's `spread` (its mean ± std over seeds) in percent with one decimal."""
    return f"{100 * metric['mean']:.1f} ± {100 * metric['std']:.1f}"


Z_95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95 % interval."""


def wilson_interval(hits: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of an accuracy of `hits` out of `n` (95 % by default).

    Unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or n hits,
    which small benchmark subsets reach; (0, 1) for no records."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= hits <= n:
        raise ValueError(f"hits must be between 0 and n ({n}), not {hits}")
    share = hits / n
    z2 = z * z
    centre = (share + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(share * (1 - share) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact_p(against: int, towards: int) -> float:
    """One-sided exact McNemar test on paired right/wrong scores of the same records.

    `against` records went from right to wrong, `towards` from wrong to right; records both
    scorings got right (or both wrong) say nothing about the change. Returns the chance,
    were the change only noise (each discordant record equally likely to go either way), of
    at least `against` of the `against + towards` discordant records going against it:
    P(X >= against) for X ~ Binomial(against + towards, 1/2). 1.0 with nothing discordant.
    """
    if against < 0 or towards < 0:
        raise ValueError("record counts cannot be negative")
    n = against + towards
    if against == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(against, n + 1))
    return min(1.0, float(tail / 2**n))
