"""Scoring: exact vs official-script matching, ±k tolerance, failures and aggregation."""

from __future__ import annotations

import pytest

from faultfinder.attributors.model import Attribution
from faultfinder.attributors.scoring import (
    OVERALL,
    ScoredRecord,
    aggregate,
    random_expectation,
    score_attribution,
    spread,
)


def predicted(agent: str, step: int, **fields: object) -> Attribution:
    return Attribution(method="test", agent=agent, step=step, **fields)  # type: ignore[arg-type]


def test_substring_bug_shows_only_in_official_columns() -> None:
    score = score_attribution(predicted("WebSurfer", 12), "WebSurfer", 1)
    assert not score.step
    assert score.official_step  # "1" in "12": the original evaluate.py counts it
    assert not score.step_within[5]
    assert score.agent and score.official_agent


def test_agent_exact_is_normalised_while_official_is_case_sensitive_substring() -> None:
    lower = score_attribution(predicted("web_surfer", 4), "WebSurfer", 4)
    assert lower.agent and not lower.official_agent
    suffixed = score_attribution(predicted("Orchestrator (thought)", 4), "Orchestrator", 4)
    assert suffixed.official_agent and not suffixed.agent
    assert suffixed.step and suffixed.official_step


@pytest.mark.parametrize(
    ("gold", "guess", "within"),
    [(10, 10, {1, 3, 5}), (10, 11, {1, 3, 5}), (10, 12, {3, 5}), (10, 15, {5}), (10, 16, set())],
)
def test_step_tolerance(gold: int, guess: int, within: set[int]) -> None:
    score = score_attribution(predicted("A", guess), "A", gold)
    assert {k for k, hit in score.step_within.items() if hit} == within
    assert score.step is (gold == guess)


def test_failed_and_missing_attributions_count_as_wrong_in_the_denominator() -> None:
    failed = score_attribution(Attribution.failed("test", "unparseable reply"), "A", 1)
    missing = score_attribution(None, "A", 1)
    for score in (failed, missing):
        assert score.failed
        assert not any(v for k, v in score.as_dict().items() if k != "failed")

    right = score_attribution(predicted("A", 1), "A", 1)
    records = [ScoredRecord("s", right)] * 3 + [ScoredRecord("s", failed)]
    summary = aggregate(records)["s"]
    assert summary.n == 4
    assert summary.failed == 1
    assert summary.accuracy["agent"] == pytest.approx(0.75)
    assert summary.accuracy["official_step"] == pytest.approx(0.75)


def test_aggregate_keeps_subsets_apart_and_adds_overall_with_costs() -> None:
    hit = score_attribution(predicted("A", 2), "A", 2)
    miss = score_attribution(predicted("B", 0), "A", 2)
    records = [
        ScoredRecord("algorithm-generated", hit, llm_calls=1, prompt_tokens=100, latency_s=1.0),
        ScoredRecord("algorithm-generated", hit, llm_calls=1, prompt_tokens=300, latency_s=3.0),
        ScoredRecord("hand-crafted", miss, llm_calls=4, completion_tokens=40, latency_s=2.0),
    ]
    result = aggregate(records)
    assert list(result) == ["algorithm-generated", "hand-crafted", OVERALL]
    assert result["algorithm-generated"].accuracy["agent_and_step"] == 1.0
    assert result["hand-crafted"].accuracy["agent"] == 0.0
    assert result[OVERALL].n == 3
    assert result[OVERALL].accuracy["step"] == pytest.approx(2 / 3)
    assert result["algorithm-generated"].mean_prompt_tokens == 200
    assert result[OVERALL].mean_llm_calls == 2
    assert result["hand-crafted"].mean_completion_tokens == 40
    assert result[OVERALL].mean_latency_s == pytest.approx(2.0)


def test_random_expectation_is_one_over_choices_and_zero_when_unreachable() -> None:
    present = random_expectation(
        ["human", "Orchestrator", "WebSurfer", "FileSurfer"], 20, "websurfer", 3
    )
    assert present.agent == pytest.approx(1 / 4)
    assert present.step == pytest.approx(1 / 20)
    absent = random_expectation(["A", "B"], 5, "C", 9)
    assert (absent.agent, absent.step) == (0.0, 0.0)


def test_spread_over_repeats() -> None:
    stats = spread([0.2, 0.4, 0.3])
    assert stats["mean"] == pytest.approx(0.3)
    assert stats["std"] == pytest.approx(0.1)
    assert (stats["min"], stats["max"]) == (0.2, 0.4)
    assert spread([0.5])["std"] == 0.0
