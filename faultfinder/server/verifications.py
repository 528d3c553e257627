"""Counterfactual verifications as attributions: what `faultfinder verify` found by
replaying a run with one candidate step corrected, stored as method `counterfactual`.

Who&When's decisive error is the earliest step whose correction would have made the run
succeed; a verification tests candidates directly, so its answer is the earliest
candidate whose correction flipped the run (an ok attribution, confidence its flip rate),
or, when none did, a failed attribution that says which were tried.
"""

from __future__ import annotations

from collections.abc import Sequence

from faultfinder.attributors.model import Attribution, AttributionStatus
from faultfinder.server.schemas import VerificationIn, VerifiedStep

__all__ = ["COUNTERFACTUAL", "counterfactual_attribution"]

COUNTERFACTUAL = "counterfactual"
"""The method name of a verification's attribution."""

BASIS = "counterfactual-replay"
"""The attribution's basis: the run replayed with the step corrected, not evidence read
from the log."""


def _steps(candidates: Sequence[VerifiedStep]) -> str:
    numbers = [str(c.step) for c in candidates]
    if len(numbers) == 1:
        return f"step {numbers[0]}"
    return "steps " + ", ".join(numbers[:-1]) + " and " + numbers[-1]


def _clauses(candidates: Sequence[VerifiedStep], chosen: VerifiedStep | None) -> list[str]:
    """What each group of candidates did, in the reason's words."""
    others = [c for c in candidates if c is not chosen]
    clauses = []
    if chosen is not None:
        clauses.append(
            f"correcting step {chosen.step} made the run succeed in {chosen.flips} of"
            f" {chosen.replays} replays"
        )
    flipped = [c for c in others if c.result == "flipped"]
    if flipped:
        clauses.append(f"correcting later {_steps(flipped)} did too")
    failed = [c for c in others if c.result == "still_failed"]
    if failed:
        clauses.append(f"correcting {_steps(failed)} did not")
    diverged = [c for c in others if c.result == "diverged"]
    if diverged:
        clauses.append(f"{_steps(diverged)} could not be replayed (the prefix diverged)")
    untested = [c for c in others if c.result in ("unmapped", "error")]
    if untested:
        clauses.append(f"{_steps(untested)} could not be corrected")
    return clauses


def counterfactual_attribution(data: VerificationIn) -> Attribution:
    """The attribution a verification amounts to (see the module docstring)."""
    candidates = sorted(data.candidates, key=lambda c: c.step)
    flipped = [c for c in candidates if c.result == "flipped"]
    chosen = flipped[0] if flipped else None
    reason = "; ".join(_clauses(candidates, chosen))
    details = {
        "search": data.search,
        "candidates": [c.model_dump(exclude_none=True) for c in candidates],
    }
    if chosen is None:
        return Attribution(
            method=COUNTERFACTUAL,
            status=AttributionStatus.FAILED,
            reason=reason,
            failure_reason="no corrected step made the run succeed",
            basis=BASIS,
            model=data.model,
            details=details,
        )
    return Attribution(
        method=COUNTERFACTUAL,
        agent=chosen.agent,
        step=chosen.step,
        reason=reason,
        confidence=chosen.flips / chosen.replays if chosen.replays else 0.0,
        basis=BASIS,
        model=data.model,
        details=details,
    )
