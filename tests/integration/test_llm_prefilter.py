"""The learned pre-filter of the LLM methods, with scripted answers over real HTTP: the
learned model's top steps are named to the model as hints, the log is shortened away from
them, and a bad option fails with the reason."""

from __future__ import annotations

from typing import Any

import pytest

from faultfinder.attributors.base import AttributeOptions, get_attributor
from faultfinder.attributors.learned import LearnedAttributor, StepModel, default_model
from faultfinder.attributors.model import Attribution, AttributionStatus, Trajectory
from tests.llm_attribution import (
    GOOD,
    MULTIPLICATION,
    assert_usable,
    decision,
    last_user_message,
    long_trajectory,
    stub_settings,
)
from tests.stub_llm import ScriptedReply, StubLLM, answer


async def prefiltered(
    method: str,
    script: list[ScriptedReply],
    trajectory: Trajectory = MULTIPLICATION,
    options: AttributeOptions | None = None,
    **config: Any,
) -> tuple[Attribution, StubLLM]:
    stub = StubLLM(script)
    with stub.running():
        attributor = get_attributor(method, settings=stub_settings(stub), **config)
        attribution = await attributor.attribute(trajectory, options or AttributeOptions())
    assert_usable(attribution, trajectory)
    return attribution, stub


def learned_top(trajectory: Trajectory, k: int) -> list[int]:
    """The learned attributor's own ranking, independent of the LLM methods' code."""
    ranked = LearnedAttributor().attribute_now(trajectory, AttributeOptions()).candidates
    return [candidate.step for candidate in ranked[:k]]


async def test_prefilter_names_the_learned_top_k_to_the_model() -> None:
    top = learned_top(MULTIPLICATION, 2)
    attribution, stub = await prefiltered("all_at_once", [GOOD], prefilter_top_k=2)
    assert attribution.status is AttributionStatus.OK
    prompt = last_user_message(stub.requests[0])
    listed = ", ".join(f"step {s} ({MULTIPLICATION.steps[s].agent})" for s in top)
    assert listed in prompt
    assert prompt.index("</log>") < prompt.index(listed)
    recorded = attribution.details["prefilter"]
    assert [c["step"] for c in recorded["candidates"]] == top
    assert recorded["model"] == "packaged learned model"


async def test_prefilter_is_off_by_default_and_per_call_options_turn_it_on() -> None:
    _, stub = await prefiltered("all_at_once", [GOOD])
    assert "Hint" not in last_user_message(stub.requests[0])
    options = AttributeOptions(extra={"prefilter_top_k": 1})
    attribution, stub = await prefiltered("all_at_once", [GOOD], options=options)
    assert "Hint" in last_user_message(stub.requests[0])
    assert len(attribution.details["prefilter"]["candidates"]) == 1


async def test_prefilter_shrinks_a_log_that_would_fit_around_its_candidates() -> None:
    trajectory = long_trajectory(12, 1500)
    pick = answer({"agent": "Coder", "step": 4, "reason": "slip"})
    whole, plain = await prefiltered("all_at_once", [pick], trajectory=trajectory)
    assert "context_dropped" not in whole.details
    seen: list[str] = []

    def model_for(run: Trajectory) -> StepModel:
        seen.append(run.run_id)
        return default_model()

    shrunk, stub = await prefiltered(
        "all_at_once", [pick], trajectory=trajectory, prefilter_top_k=2, prefilter_model=model_for
    )
    assert seen == ["long"]
    full, short = last_user_message(plain.requests[0]), last_user_message(stub.requests[0])
    # Four of twelve steps whole, eight cut to 400 characters: about half the prompt.
    assert len(short) < 0.6 * len(full)
    top = learned_top(trajectory, 2)
    lines = {int(line.split()[1]): line for line in short.splitlines() if line.startswith("Step ")}
    for index in range(12):
        kept = any(0 <= index - candidate <= 1 for candidate in top)
        assert ("x" * 1500 in lines[index]) is kept, index
        assert f"end{index}" in lines[index]
    dropped = shrunk.details["context_dropped"][0]
    assert dropped["kept_around_steps"] == top
    assert dropped["shortened_steps"] == 12 - len(
        {s + d for s in top for d in (0, 1)} & set(range(12))
    )
    assert dropped["chars_dropped"] > 5 * 1000


async def test_prefilter_reaches_binary_search_a2p_and_the_consensus_focus() -> None:
    top = learned_top(MULTIPLICATION, 1)[0]
    halves = [answer({"half": "upper", "reason": "a"})] * 3
    _, stub = await prefiltered("binary_search", halves, prefilter_top_k=1)
    first = last_user_message(stub.requests[0])
    assert f"step {top} (" in first[first.index("</log>") :]

    pick = answer({"agent": "Calculator", "step": 2, "reason": "slip"})
    _, stub = await prefiltered("a2p", [pick], prefilter_top_k=1)
    assert "Hint" in last_user_message(stub.requests[0])

    vote = answer({"agent": "Calculator", "step": 2, "confidence": 0.5, "evidence": "41"})
    attribution, stub = await prefiltered("consensus", [vote] * 3, prefilter_top_k=1)
    assert attribution.details["focus_step"] == top
    assert all("Hint" in last_user_message(request) for request in stub.requests)


async def test_step_by_step_takes_no_hints() -> None:
    attribution, stub = await prefiltered(
        "step_by_step", [decision(False), decision(True)], prefilter_top_k=2
    )
    assert "prefilter" not in attribution.details
    assert all("Hint" not in last_user_message(request) for request in stub.requests)


async def test_a_bad_prefilter_option_fails_with_the_reason() -> None:
    options = AttributeOptions(extra={"prefilter_top_k": "five"})
    attribution, stub = await prefiltered("all_at_once", [GOOD], options=options)
    assert attribution.status is AttributionStatus.FAILED
    assert "prefilter_top_k" in (attribution.failure_reason or "")
    assert not stub.requests
    with pytest.raises(ValueError, match="prefilter_top_k"):
        get_attributor("all_at_once", prefilter_top_k=-1)
