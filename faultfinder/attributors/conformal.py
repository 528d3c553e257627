"""Conformal prediction sets: a contiguous range of steps that holds the decisive step w.p. ≥ 1−α.

Any attributor's per-step scores are normalised to a distribution over steps. On a
labelled calibration set, the nonconformity of the gold step g is the smaller of the
probability mass at or before g and at or after g. A new run's set keeps the steps
whose mass from the left and from the right both reach the calibrated threshold
(prefix and suffix cumulative-mass filters), so it is contiguous, and by
exchangeability it misses the decisive step with probability at most α.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from faultfinder.attributors.model import Attribution, AttributionStatus, PredictionSet

__all__ = [
    "POOLED",
    "CalibrationExample",
    "ConformalCalibration",
    "attach_prediction_set",
    "calibrate",
    "contiguous_set",
    "nonconformity",
    "step_distribution",
]

POOLED = "*"
"""The calibration group every example belongs to; used for runs of an unknown group."""

_EPS = 1e-12
# Steps a method did not list still get a little mass, so that a contiguous set can
# span them.
_UNLISTED_MASS = 1e-6


def _cumulative(probabilities: Sequence[float]) -> tuple[list[float], list[float]]:
    """Mass at-or-before and at-or-after each step."""
    left: list[float] = []
    running = 0.0
    for p in probabilities:
        running += p
        left.append(running)
    right: list[float] = []
    running = 0.0
    for p in reversed(probabilities):
        running += p
        right.append(running)
    right.reverse()
    return left, right


def _normalised(probabilities: Sequence[float]) -> list[float]:
    cleaned = [p if p > 0 and math.isfinite(p) else 0.0 for p in probabilities]
    total = sum(cleaned)
    if total <= 0:
        return [1.0 / len(cleaned)] * len(cleaned) if cleaned else []
    return [p / total for p in cleaned]


def nonconformity(probabilities: Sequence[float], gold: int) -> float:
    """min(mass at or before `gold`, mass at or after `gold`): small means surprising."""
    if not 0 <= gold < len(probabilities):
        raise ValueError(f"gold step {gold} is outside 0..{len(probabilities) - 1}")
    left, right = _cumulative(_normalised(probabilities))
    return min(left[gold], right[gold])


def contiguous_set(probabilities: Sequence[float], threshold: float) -> tuple[int, int]:
    """[lo, hi]: the steps whose mass from the left and from the right both reach `threshold`.

    The threshold is capped at 1/2, which keeps the set non-empty (the weighted median
    step always qualifies).
    """
    if not probabilities:
        raise ValueError("no steps to build a prediction set over")
    tau = min(threshold, 0.5)
    left, right = _cumulative(_normalised(probabilities))
    lo = next(i for i, mass in enumerate(left) if mass >= tau - _EPS)
    hi = next(i for i in range(len(right) - 1, -1, -1) if right[i] >= tau - _EPS)
    if hi < lo:  # only reachable through rounding; keep the set non-empty
        hi = lo
    return lo, hi


@dataclass(frozen=True)
class CalibrationExample:
    """One labelled run: the method's step distribution, the gold step and the run's group."""

    probabilities: Sequence[float]
    gold: int
    group: str | None = None


@dataclass(frozen=True)
class ConformalCalibration:
    """Sorted calibration nonconformity scores per group (`POOLED` holds all of them)."""

    scores: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def threshold(self, alpha: float, group: str | None = None) -> float:
        """The k-th smallest calibration score, k = ⌊α(n+1)⌋ (0 when k = 0: keep every step).

        Uses the run's group when it was calibrated (Mondrian conformal: coverage holds
        per group), else the pooled scores.
        """
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        key = group if group is not None and group in self.scores else POOLED
        values = self.scores.get(key, ())
        k = math.floor(alpha * (len(values) + 1))
        if k <= 0:
            return 0.0
        return values[k - 1]

    def prediction_set(
        self, probabilities: Sequence[float], alpha: float, group: str | None = None
    ) -> PredictionSet:
        lo, hi = contiguous_set(probabilities, self.threshold(alpha, group))
        return PredictionSet(lo=lo, hi=hi, alpha=alpha)

    def to_dict(self) -> dict[str, Any]:
        return {"scores": {name: list(values) for name, values in self.scores.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConformalCalibration:
        raw = data.get("scores") if isinstance(data, Mapping) else None
        if not isinstance(raw, Mapping):
            raise ValueError("conformal calibration needs 'scores': {group: [numbers]}")
        return cls({str(k): tuple(sorted(float(v) for v in vs)) for k, vs in raw.items()})


def calibrate(examples: Iterable[CalibrationExample]) -> ConformalCalibration:
    """Calibration from labelled runs the scorer was not trained on."""
    groups: dict[str, list[float]] = {POOLED: []}
    for example in examples:
        score = nonconformity(example.probabilities, example.gold)
        groups[POOLED].append(score)
        if example.group is not None and example.group != POOLED:
            groups.setdefault(example.group, []).append(score)
    return ConformalCalibration({name: tuple(sorted(v)) for name, v in groups.items()})


def step_distribution(attribution: Attribution, n_steps: int) -> list[float]:
    """Any attribution's per-step scores as a distribution over `n_steps` steps.

    Uses `details["step_probabilities"]` when the method gives one, else the candidate
    scores (negative scores count as 0, unlisted steps get a tiny mass), else a point
    mass on the blamed step.
    """
    if n_steps <= 0:
        return []
    given = attribution.details.get("step_probabilities")
    if isinstance(given, list) and len(given) == n_steps:
        return _normalised([float(p) for p in given])
    weights = [_UNLISTED_MASS] * n_steps
    listed = False
    for candidate in attribution.candidates:
        if 0 <= candidate.step < n_steps:
            weights[candidate.step] = max(weights[candidate.step], candidate.score, 0.0)
            listed = True
    if not listed and attribution.step is not None and 0 <= attribution.step < n_steps:
        weights[attribution.step] = 1.0
    return _normalised(weights)


def attach_prediction_set(
    attribution: Attribution,
    n_steps: int,
    calibration: ConformalCalibration,
    alpha: float,
    group: str | None = None,
) -> Attribution:
    """The attribution with `prediction_set` filled in (failed attributions unchanged)."""
    if attribution.status is AttributionStatus.FAILED or n_steps <= 0:
        return attribution
    probabilities = step_distribution(attribution, n_steps)
    return attribution.model_copy(
        update={"prediction_set": calibration.prediction_set(probabilities, alpha, group)}
    )
