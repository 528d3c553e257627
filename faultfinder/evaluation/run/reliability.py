"""How far an attribution's own account of itself can be trusted: step accuracy by what it
rests on (an evidence family, or a guess) and by its confidence band.

A reliability table says whether "evidence-based" means more often right than "a guess",
and whether a confidence of 0.8 is right about as often as 0.8 says. It is computed on
held-out answers only (cross-validation folds, or a set the model never saw).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BANDS: tuple[tuple[float, float], ...] = ((0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0001))
"""Confidence bands, lower bound included, upper excluded (the last includes 1.0)."""

GUESS = "guess"


@dataclass(frozen=True)
class Answer:
    """One held-out answer: what it rested on, how sure it said it was, whether it was right."""

    basis: str | None
    confidence: float | None
    step_right: bool


def _row(name: str, answers: Sequence[Answer]) -> dict[str, Any]:
    right = sum(a.step_right for a in answers)
    return {
        "group": name,
        "n": len(answers),
        "step_accuracy": right / len(answers) if answers else None,
        "mean_confidence": (
            sum(a.confidence for a in answers if a.confidence is not None)
            / max(1, sum(a.confidence is not None for a in answers))
        )
        if answers
        else None,
    }


def reliability(answers: Iterable[Answer]) -> dict[str, list[dict[str, Any]]]:
    """Step accuracy by basis (evidence vs guess, then each family) and by confidence band."""
    listed = list(answers)
    evidence = [a for a in listed if a.basis not in (None, GUESS)]
    guesses = [a for a in listed if a.basis == GUESS]
    unstated = [a for a in listed if a.basis is None]
    by_basis = [_row("evidence (any family)", evidence), _row("guess", guesses)]
    if unstated:
        by_basis.append(_row("basis not stated", unstated))
    for family in sorted({a.basis for a in evidence if a.basis is not None}):
        by_basis.append(_row(f"  {family}", [a for a in evidence if a.basis == family]))
    by_band = []
    for lo, hi in BANDS:
        inside = [a for a in listed if a.confidence is not None and lo <= a.confidence < hi]
        by_band.append(_row(f"{lo:.2f}–{min(hi, 1.0):.2f}", inside))
    return {"by_basis": by_basis, "by_confidence": by_band}


def render_reliability(table: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """The table as Markdown lines."""

    def percent(value: float | None) -> str:
        return "—" if value is None else f"{100 * value:.1f}"

    def confidence(value: float | None) -> str:
        return "—" if value is None else f"{value:.2f}"

    def rows(name: str, group: str) -> list[str]:
        head = [f"| {name} | n | step % | mean confidence |", "|---|---:|---:|---:|"]
        return head + [
            f"| {row['group']} | {row['n']} | {percent(row['step_accuracy'])} | "
            f"{confidence(row['mean_confidence'])} |"
            for row in table[group]
        ]

    return [*rows("what it rests on", "by_basis"), "", *rows("confidence", "by_confidence")]
