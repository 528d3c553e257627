"""Failure modes: what kind of mistake a blamed step made, in the Who&When Pro taxonomy's
codes (R.1 hallucination, A.1 tool arguments, C.2 communication failure, …).

An attribution names its mode from its evidence: the evidence family it rests on
(`Attribution.basis`, e.g. `unsupported-figure`), the rule that chose the step, or, for
an answer that records neither, the wording its reason shares with the evidence
sentences; an LLM attributor's answer may name a code outright. A guess has no mode.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["MODES", "answer_mode", "failure_mode", "mode_name"]

MODES: Final[dict[str, str]] = {
    "P.1": "Visual misidentification",
    "P.2": "Spatial/grounding error",
    "R.1": "Hallucination",
    "R.2": "Reasoning error",
    "R.3": "Numerical/calculation error",
    "R.4": "Task misunderstanding",
    "PL.1": "Ineffective planning",
    "PL.2": "Goal drift",
    "A.1": "Tool parameter/invocation error",
    "A.2": "Output format/syntax error",
    "A.3": "Premature termination",
    "A.4": "Repetitive/looping behaviour",
    "V.1": "Context/memory loss",
    "V.2": "Inadequate or incorrect verification",
    "C.1": "Delegation/orchestration error",
    "C.2": "Communication failure",
    "C.3": "Over-reliance on other agents",
}
"""The taxonomy's codes and names (Who&When Pro, CC BY 4.0)."""

EVIDENCE_MODES: Final[dict[str, str]] = {
    "unsupported-figure": "R.1",
    "made-up-final-answer": "R.1",
    "invented-data": "R.1",
    "contradicts-report": "R.2",
    "contradicts-records": "R.2",
    "misattributed-figure": "R.2",
    "first-to-state-final-answer": "R.2",
    "criticised": "R.2",
    "contradicts-ground-truth": "R.3",
    "wrong-arithmetic": "R.3",
    "breaks-task-constraint": "V.1",
    "unsupported-argument": "A.1",
    "error": "A.1",
    "tool-error": "A.1",
    "recovered-error": "A.1",
    "first-error": "A.1",
    # A state-changing call on an order or booking that a later step could no longer
    # change: the call was made wrongly or too early (its invocation), not misread data.
    "caused-later-refusal": "A.1",
    "gave-up": "A.3",
    "unfinished": "A.3",
    "unfinished-last-acting-step": "A.3",
    "repeated-call": "A.4",
    "repetition": "A.4",
    "repeats-unsupported-figure": "V.2",
    "handed-on-nothing": "C.1",
    "withheld-figures": "C.2",
    "user-withheld": "C.2",
}
"""Evidence family (an evidence kind, a rule) → the mode it shows."""

_WORDING: Final[tuple[tuple[re.Pattern[str], str], ...]] = tuple(
    (re.compile(pattern, re.IGNORECASE), mode)
    for pattern, mode in (
        (r"\bstated .+ right after\b", "R.2"),
        (r"which no earlier tool output, user message or the task", "R.1"),
        (r"first to state the final answer .+ which nothing observed", "R.1"),
        (r"assumed, simulated or invented data|\bhallucinat", "R.1"),
        (r"first to state figures none of which is the correct answer", "R.3"),
        (r"\bwrote .+ = .+; .+ is ", "R.3"),
        (r"although the task says", "V.1"),
        (r"\bcalled \S+ with \S+=", "A.1"),
        (r"\bcalled \S+ again with the same arguments|repeated one of its recent steps", "A.4"),
        (r"a figure no observation supports", "V.2"),
        (r"passed its turn on without any of the figures", "C.2"),
        (r"withheld by the simulated user|withholds? ", "C.2"),
        (r"apologised or said it could not go on|run never finished", "A.3"),
        (r"first error signal|shows (an? )?(error|exception|traceback)|reported .*error", "A.1"),
        (r"\bcalled .+ step wrong\b|\bfirst agent to state the final answer\b", "R.2"),
    )
)
"""Wording of the evidence sentences (`learned/evidence.py`, `heuristics.py`) → mode, for
an answer that records no evidence family (one stored before families were recorded)."""

_CODE = re.compile(r"\b(PL\.[12]|[PRAVC]\.[1-4])\b")
_GUESS: Final = "guess"


def mode_name(code: str | None) -> str:
    """`R.1` → "Hallucination"; "" for None or an unknown code."""
    return MODES.get(code or "", "")


def failure_mode(
    *,
    basis: str | None = None,
    reason: str = "",
    error_category: str | None = None,
    details: Mapping[str, Any] | None = None,
) -> str | None:
    """The mode an ok attribution's evidence shows, or None (a guess, or nothing known)."""
    details = details or {}
    if basis == _GUESS or details.get("guess") is True:
        return None
    named = _named_code(error_category) or _named_code(details.get("mode"))
    if named is not None:
        return named
    families: list[object] = [basis, details.get("rule")]
    kinds = details.get("evidence_kinds")
    if isinstance(kinds, list):
        families += kinds
    for family in families:
        if isinstance(family, str) and family in EVIDENCE_MODES:
            return EVIDENCE_MODES[family]
    why = details.get("why")
    return _from_wording([reason, *(why if isinstance(why, list) else [])])


def answer_mode(answer: Mapping[str, Any]) -> str | None:
    """The mode of an attribution as JSON (`Attribution.model_dump`, a stored payload):
    the one it names, else the one its evidence shows; None for a failed answer."""
    named = answer.get("mode")
    if isinstance(named, str) and named:
        return named
    if str(answer.get("status", "ok")) != "ok":
        return None
    basis, details = answer.get("basis"), answer.get("details")
    return failure_mode(
        basis=basis if isinstance(basis, str) else None,
        reason=str(answer.get("reason") or ""),
        error_category=answer.get("error_category"),
        details=details if isinstance(details, Mapping) else None,
    )


def _named_code(value: object) -> str | None:
    """A taxonomy code an answer names ("R.3", "R.3 numerical error"), else None."""
    if not isinstance(value, str):
        return None
    found = _CODE.search(value.upper())
    return found.group(1) if found and found.group(1) in MODES else None


def _from_wording(texts: Iterable[object]) -> str | None:
    for text in texts:
        if not isinstance(text, str) or not text:
            continue
        if text.casefold().startswith("a guess"):
            return None
        for pattern, mode in _WORDING:
            if pattern.search(text):
                return mode
    return None
