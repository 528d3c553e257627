"""Failure modes: every ok attribution names the Who&When Pro mode its evidence shows."""

from __future__ import annotations

import pytest

from faultfinder.attributors.failure_modes import MODES, failure_mode, mode_name
from faultfinder.attributors.model import Attribution


def _answer(**fields: object) -> Attribution:
    return Attribution.model_validate({"method": "m", "agent": "Planner", "step": 2, **fields})


@pytest.mark.parametrize(
    ("basis", "mode"),
    [
        ("unsupported-figure", "R.1"),
        ("contradicts-records", "R.2"),
        ("contradicts-ground-truth", "R.3"),
        ("unsupported-argument", "A.1"),
        ("tool-error", "A.1"),
        ("repeated-call", "A.4"),
        ("withheld-figures", "C.2"),
        ("user-withheld", "C.2"),
        ("unfinished", "A.3"),
    ],
)
def test_the_evidence_family_names_the_mode(basis: str, mode: str) -> None:
    assert _answer(basis=basis).mode == mode
    assert mode in MODES


def test_a_guess_has_no_mode() -> None:
    assert _answer(basis="guess").mode is None
    assert _answer(reason="a guess: no step shows an error", details={"guess": True}).mode is None


def test_a_mode_the_answer_names_wins_and_an_llm_category_may_name_one() -> None:
    assert _answer(basis="tool-error", mode="V.1").mode == "V.1"
    assert _answer(error_category="R.3 numerical error").mode == "R.3"
    assert _answer(error_category="made something up").mode is None


def test_an_answer_stored_without_a_family_takes_the_mode_its_wording_shows() -> None:
    stored = {
        "method": "learned",
        "agent": "Planner",
        "step": 2,
        "reason": "step 2: Planner called flights.search with date='Saturday', which no earlier"
        " user message, tool output or the task mentions",
    }
    assert Attribution.model_validate(stored).mode == "A.1"
    # Read back from its JSON, the mode stays.
    again = Attribution.model_validate(Attribution.model_validate(stored).model_dump(mode="json"))
    assert again.mode == "A.1"


def test_a_failed_attribution_has_no_mode() -> None:
    assert Attribution.failed("m", "the model timed out", basis="tool-error").mode is None


def test_mode_names() -> None:
    assert mode_name("R.1") == "Hallucination"
    assert mode_name(None) == mode_name("Z.9") == ""
    assert failure_mode(basis="no-such-family", reason="") is None
