"""The reliability table: step accuracy by what an answer rests on and by its confidence."""

from __future__ import annotations

from faultfinder.evaluation.run.reliability import Answer, reliability, render_reliability


def test_evidence_and_guesses_are_scored_apart_and_each_family_on_its_own() -> None:
    answers = [
        Answer("tool-error", 0.9, True),
        Answer("tool-error", 0.8, True),
        Answer("unsupported-figure", 0.6, False),
        Answer("guess", 0.2, False),
        Answer("guess", 0.3, True),
        Answer(None, None, True),
    ]
    table = reliability(answers)
    rows = {row["group"]: row for row in table["by_basis"]}
    assert rows["evidence (any family)"]["n"] == 3
    assert rows["evidence (any family)"]["step_accuracy"] == 2 / 3
    assert rows["guess"]["step_accuracy"] == 0.5
    assert rows["basis not stated"]["n"] == 1
    assert rows["  tool-error"]["step_accuracy"] == 1.0
    bands = {row["group"]: row for row in table["by_confidence"]}
    assert bands["0.75–1.00"]["n"] == 2 and bands["0.75–1.00"]["step_accuracy"] == 1.0
    assert bands["0.00–0.25"]["n"] == 1 and bands["0.00–0.25"]["step_accuracy"] == 0.0
    # An answer without a confidence is in no band.
    assert sum(row["n"] for row in table["by_confidence"]) == 5
    text = "\n".join(render_reliability(table))
    assert "| guess | 2 | 50.0 | 0.25 |" in text
