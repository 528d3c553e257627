"""Running the LLM methods in tests: the methods, a six-step failure to attribute, the
checks every answer must pass, and one attribution against the scripted stub
(`tests/stub_llm.py`) over real HTTP."""

from __future__ import annotations

import uuid
from typing import Any

from faultfinder.attributors.base import AttributeOptions, get_attributor
from faultfinder.attributors.llm import ModelSettings, StructuredRung
from faultfinder.attributors.model import (
    Attribution,
    AttributionStatus,
    Step,
    StepKind,
    Trajectory,
    validate_against,
)
from tests.stub_llm import ScriptedReply, StubLLM, answer

__all__ = [
    "GOOD",
    "LLM_METHODS",
    "MULTIPLICATION",
    "assert_usable",
    "attribute",
    "decision",
    "last_user_message",
    "long_trajectory",
    "stub_settings",
]

LLM_METHODS = ("all_at_once", "step_by_step", "binary_search", "hybrid", "a2p", "consensus")

# A six-step failure: the Calculator's arithmetic slip at step 2 decides the outcome.
MULTIPLICATION = Trajectory(
    run_id="multiplication",
    task="What is 17 * 3? Reply with the number.",
    ground_truth="51",
    steps=(
        Step(index=0, agent="user", kind=StepKind.HUMAN, content="What is 17 * 3?"),
        Step(index=1, agent="Planner", content="Plan: Calculator multiplies, Checker verifies."),
        Step(index=2, agent="Calculator", content="17 * 3 = 41."),
        Step(index=3, agent="Checker", content="The calculation looks fine."),
        Step(index=4, agent="Writer", content="The answer is 41."),
        Step(index=5, agent="Checker", content="Final answer confirmed: 41. TERMINATE"),
    ),
)


def assert_usable(attribution: Attribution, trajectory: Trajectory) -> None:
    """What a stored attribution must satisfy: a valid answer, or a failure with a reason."""
    if attribution.status is AttributionStatus.OK:
        assert validate_against(attribution, trajectory) is None
        assert attribution.agent in trajectory.agents
    else:
        assert attribution.failure_reason
        assert attribution.agent is None and attribution.step is None


def stub_settings(stub: StubLLM, **fields: Any) -> ModelSettings:
    # A model name per test keeps the process-wide memory of endpoint rungs test-local.
    values: dict[str, Any] = {
        "base_url": stub.base_url,
        "model": f"stub-{uuid.uuid4().hex[:8]}",
        "timeout": 5.0,
        "retries": 1,
        "first_rung": StructuredRung.JSON_OBJECT,
    }
    values.update(fields)
    return ModelSettings.model_validate(values)


async def attribute(
    method: str,
    script: list[ScriptedReply],
    trajectory: Trajectory = MULTIPLICATION,
    options: AttributeOptions | None = None,
    reject_json_schema: bool = False,
    **fields: Any,
) -> tuple[Attribution, StubLLM]:
    stub = StubLLM(script, reject_json_schema=reject_json_schema)
    with stub.running():
        attributor = get_attributor(method, settings=stub_settings(stub, **fields))
        attribution = await attributor.attribute(trajectory, options or AttributeOptions())
    assert_usable(attribution, trajectory)
    return attribution, stub


def last_user_message(request: dict[str, Any]) -> str:
    return str([m for m in request["messages"] if m["role"] == "user"][-1]["content"])


GOOD = answer({"agent": "Calculator", "step": 2, "reason": "17 * 3 is 51, not 41."})


def decision(decisive: bool) -> ScriptedReply:
    return answer({"decisive_error": decisive, "reason": "because"})


def long_trajectory(steps: int, chars: int) -> Trajectory:
    agents = ["Planner", "Coder", "Computer_terminal"]
    return Trajectory(
        run_id="long",
        task="Count the rows.",
        steps=tuple(
            Step(index=i, agent=agents[i % 3], content=f"step {i} " + "x" * chars + f" end{i}")
            for i in range(steps)
        ),
    )
