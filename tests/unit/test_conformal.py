"""Conformal step sets: contiguous, non-empty, and covering the decisive step w.p. ≥ 1−α."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from faultfinder.attributors.conformal import (
    POOLED,
    CalibrationExample,
    ConformalCalibration,
    attach_prediction_set,
    calibrate,
    contiguous_set,
    nonconformity,
    step_distribution,
)
from faultfinder.attributors.model import Attribution, Candidate


def dirichlet(rng: random.Random, n: int, concentration: float) -> list[float]:
    weights = [rng.gammavariate(concentration, 1.0) for _ in range(n)]
    total = sum(weights)
    return [w / total for w in weights]


def draw(rng: random.Random, probabilities: list[float]) -> int:
    return rng.choices(range(len(probabilities)), weights=probabilities)[0]


def synthetic_runs(seed: int, count: int, *, honest: bool) -> list[tuple[list[float], int]]:
    """Runs whose decisive step is drawn from a known distribution over 5..60 steps.

    An honest scorer reports that distribution; a dishonest one reports a blurred,
    shifted version (coverage must hold either way, only the set size suffers).
    """
    rng = random.Random(seed)
    runs = []
    for _ in range(count):
        n = rng.randint(5, 60)
        truth = dirichlet(rng, n, 0.3)
        gold = draw(rng, truth)
        reported = truth if honest else dirichlet(rng, n, 1.0)
        runs.append((reported, gold))
    return runs


@pytest.mark.parametrize("honest", [True, False])
@pytest.mark.parametrize("alpha", [0.1, 0.2])
def test_held_out_coverage_is_at_least_one_minus_alpha(alpha: float, honest: bool) -> None:
    calibration = calibrate(
        CalibrationExample(p, gold) for p, gold in synthetic_runs(1, 2000, honest=honest)
    )
    test = synthetic_runs(2, 2000, honest=honest)
    hits = 0
    for probabilities, gold in test:
        interval = calibration.prediction_set(probabilities, alpha)
        hits += interval.lo <= gold <= interval.hi
    coverage = hits / len(test)
    # Coverage given one calibration draw varies around 1−α with the spread of a
    # Beta(n+1−l, l) (≈ √(α(1−α)/n)); the test estimate adds its own sampling error.
    standard_error = math.sqrt(alpha * (1 - alpha) * (1 / 2000 + 1 / len(test)))
    assert coverage >= 1 - alpha - 3 * standard_error
    # and the sets are not trivially the whole run
    assert coverage <= 1 - alpha + 0.08


def test_an_informative_scorer_gets_small_sets_and_a_useless_one_does_not() -> None:
    def mean_removed(honest: bool) -> float:
        calibration = calibrate(
            CalibrationExample(p, g) for p, g in synthetic_runs(3, 400, honest=honest)
        )
        removed: list[float] = []
        for probabilities, _ in synthetic_runs(4, 500, honest=honest):
            interval = calibration.prediction_set(probabilities, 0.1)
            removed.append(1 - (interval.hi - interval.lo + 1) / len(probabilities))
        return sum(removed) / len(removed)

    assert mean_removed(honest=True) > mean_removed(honest=False) + 0.1


@given(
    st.lists(st.floats(min_value=0.0, max_value=10.0), min_size=1, max_size=40),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_sets_are_contiguous_non_empty_and_within_range(
    weights: list[float], threshold: float
) -> None:
    lo, hi = contiguous_set(weights, threshold)
    assert 0 <= lo <= hi < len(weights)


def test_threshold_zero_keeps_every_step_and_mass_filters_trim_the_ends() -> None:
    probabilities = [0.05, 0.05, 0.8, 0.05, 0.05]
    assert contiguous_set(probabilities, 0.0) == (0, 4)
    assert contiguous_set(probabilities, 0.1) == (1, 3)
    assert contiguous_set(probabilities, 0.2) == (2, 2)


def test_nonconformity_is_the_smaller_tail_mass() -> None:
    probabilities = [0.1, 0.2, 0.3, 0.4]
    assert nonconformity(probabilities, 0) == pytest.approx(0.1)
    assert nonconformity(probabilities, 3) == pytest.approx(0.4)
    assert nonconformity(probabilities, 2) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="outside"):
        nonconformity(probabilities, 4)


def test_too_few_calibration_runs_give_the_whole_run() -> None:
    calibration = calibrate([CalibrationExample([0.5, 0.5], 0)] * 5)
    # ⌊0.1 × 6⌋ = 0: no calibration score is small enough to trust
    assert calibration.threshold(0.1) == 0.0
    interval = calibration.prediction_set([0.0, 0.0, 1.0, 0.0], 0.1)
    assert (interval.lo, interval.hi) == (0, 3)


def test_groups_are_calibrated_separately_and_unknown_groups_use_the_pool() -> None:
    examples = [CalibrationExample([0.9, 0.1], 0, "sharp")] * 30 + [
        CalibrationExample([0.5, 0.5], 1, "vague")
    ] * 30
    calibration = calibrate(examples)
    assert set(calibration.scores) == {POOLED, "sharp", "vague"}
    assert calibration.threshold(0.1, "sharp") == pytest.approx(0.9)
    assert calibration.threshold(0.1, "vague") == pytest.approx(0.5)
    assert calibration.threshold(0.1, "unknown") == calibration.threshold(0.1)
    restored = ConformalCalibration.from_dict(calibration.to_dict())
    assert restored.threshold(0.2, "sharp") == calibration.threshold(0.2, "sharp")


def test_any_attribution_becomes_a_distribution_and_gets_a_set() -> None:
    attribution = Attribution(
        method="first_error",
        agent="Coder",
        step=2,
        candidates=(
            Candidate(step=2, agent="Coder", score=0.9),
            Candidate(step=4, agent="Coder", score=0.1),
        ),
    )
    distribution = step_distribution(attribution, 6)
    assert sum(distribution) == pytest.approx(1.0)
    assert max(range(6), key=lambda i: distribution[i]) == 2
    calibration = calibrate(CalibrationExample(distribution, 2) for _ in range(50))
    with_set = attach_prediction_set(attribution, 6, calibration, 0.1)
    assert with_set.prediction_set is not None
    assert with_set.prediction_set.lo <= 2 <= with_set.prediction_set.hi
    assert with_set.prediction_set.hi - with_set.prediction_set.lo + 1 < 6

    failed = Attribution.failed("first_error", "no steps")
    assert attach_prediction_set(failed, 6, calibration, 0.1) is failed
