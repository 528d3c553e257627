"""The LLM methods' own rules, with scripted answers over real HTTP: step by step stops at
the first decisive step, binary search follows the halves, hybrid walks the chosen agent's
steps, A2P takes the earliest saving correction, consensus weighs its votes, a tool's
report is answered for by the agent that ran it, and a long log is shortened to fit.

Against a real local model: test_llm_local_model.py; protocol faults:
test_llm_protocol_faults.py; the learned pre-filter: test_llm_prefilter.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from faultfinder.attributors.base import available_attributors
from faultfinder.attributors.llm import StructuredRung
from faultfinder.attributors.model import AttributionStatus, Step, StepKind, Trajectory
from tests.llm_attribution import (
    LLM_METHODS,
    attribute,
    decision,
    last_user_message,
    long_trajectory,
)
from tests.stub_llm import ScriptedReply, answer, error


def test_every_llm_method_is_registered() -> None:
    assert set(LLM_METHODS) <= set(available_attributors())


async def test_step_by_step_stops_at_the_first_yes() -> None:
    script = [decision(False), decision(True), decision(True)]
    attribution, stub = await attribute("step_by_step", script)
    assert (attribution.agent, attribution.step) == ("Calculator", 2)
    # The user's question (step 0) is never judged: step 1 is the first call.
    assert attribution.llm_calls == 2
    assert "The latest step is step 1, by Planner" in last_user_message(stub.requests[0])
    # Each prompt shows the log up to and including the step being judged.
    assert "Step 2 - Calculator" in last_user_message(stub.requests[1])
    assert "Step 3 -" not in last_user_message(stub.requests[1])


async def test_step_by_step_with_no_yes_fails() -> None:
    attribution, _ = await attribute("step_by_step", [decision(False)] * 6)
    assert attribution.status is AttributionStatus.FAILED
    assert attribution.failure_reason and "5 judged" in attribution.failure_reason
    assert attribution.llm_calls == 5


def half(which: str) -> ScriptedReply:
    return answer({"half": which, "reason": which})


async def test_binary_search_follows_the_halves() -> None:
    # Steps 1..5 (the user's question is not a candidate) split at 3: upper keeps 1..3,
    # which splits at 2: upper keeps 1..2, which splits at 1: lower keeps step 2.
    attribution, stub = await attribute(
        "binary_search", [half("upper"), half("upper"), half("lower")]
    )
    assert (attribution.agent, attribution.step) == ("Calculator", 2)
    assert attribution.llm_calls == 3
    assert "upper half (steps 1 to 3)" in last_user_message(stub.requests[0])
    assert "Step 4 -" not in last_user_message(stub.requests[1])


# Code and its run: the terminal's report (step 3) is where the error shows, but the
# Coder who wrote and ran the code answers for it.
CODE_RUN = Trajectory(
    run_id="code-run",
    task="Sum the numbers 1 to 10.",
    ground_truth="55",
    steps=(
        Step(index=0, agent="user", kind=StepKind.HUMAN, content="Sum the numbers 1 to 10."),
        Step(index=1, agent="Planner", content="Coder: write a loop and run it."),
        Step(index=2, agent="Coder", content="```python\nprint(sum(range(10)))\n```"),
        Step(index=3, agent="Computer_terminal", kind=StepKind.TOOL, content="45"),
        Step(index=4, agent="Planner", content="The sum is 45. TERMINATE"),
    ),
)


async def test_binary_search_ending_on_a_tool_report_names_the_agent_that_ran_it() -> None:
    # Steps 1..4 split at 2: lower keeps 3..4, which splits at 3: upper keeps step 3.
    attribution, _ = await attribute(
        "binary_search", [half("lower"), half("upper")], trajectory=CODE_RUN
    )
    assert (attribution.agent, attribution.step) == ("Coder", 3)


async def test_step_by_step_at_a_tool_report_names_the_agent_that_ran_it() -> None:
    script = [decision(False), decision(False), decision(True)]
    attribution, _ = await attribute("step_by_step", script, trajectory=CODE_RUN)
    assert (attribution.agent, attribution.step) == ("Coder", 3)


async def test_a_reply_naming_the_terminal_or_the_user_blames_the_answering_agent() -> None:
    # A server without grammar-constrained output can still name someone outside the enum.
    terminal = answer({"agent": "Computer_terminal", "step": 3, "reason": "printed 45"})
    attribution, stub = await attribute(
        "all_at_once",
        [terminal],
        trajectory=CODE_RUN,
        reject_json_schema=True,
        first_rung=StructuredRung.JSON_SCHEMA,
    )
    assert (attribution.agent, attribution.step) == ("Coder", 3)
    enum = stub.completions[0]["response_format"]["schema"]["properties"]["agent"]["enum"]
    assert enum == ["Planner", "Coder"]
    user = answer({"agent": "user", "step": 2, "reason": "asked badly"})
    attribution, _ = await attribute("all_at_once", [user], trajectory=CODE_RUN)
    assert (attribution.agent, attribution.step) == ("Coder", 2)


async def test_a_method_whose_model_gives_no_figure_stores_no_confidence() -> None:
    """No made-up 0.0: a reader cannot tell that from a method sure it is wrong."""
    pick = answer({"agent": "Coder", "step": 2, "reason": "summed 0 to 9"})
    attribution, _ = await attribute("all_at_once", [pick], trajectory=CODE_RUN)
    assert attribution.status is AttributionStatus.OK
    assert attribution.confidence is None
    assert attribution.model_dump(mode="json")["confidence"] is None


async def test_hybrid_walks_only_the_chosen_agents_steps() -> None:
    pick = answer({"agent": "Checker", "step": 5, "reason": "approved a wrong answer"})
    attribution, stub = await attribute("hybrid", [pick, decision(True)])
    assert (attribution.agent, attribution.step) == ("Checker", 3)
    assert "The latest step is step 3, by Checker" in last_user_message(stub.requests[1])


async def test_hybrid_keeps_the_all_at_once_step_when_no_step_is_decisive() -> None:
    pick = answer({"agent": "Checker", "step": 5, "reason": "approved a wrong answer"})
    attribution, _ = await attribute("hybrid", [pick, decision(False), decision(False)])
    assert (attribution.agent, attribution.step) == ("Checker", 5)
    assert attribution.llm_calls == 3


async def test_a2p_blames_the_earliest_step_whose_correction_saves_the_run() -> None:
    reply = answer(
        {
            "analyses": [
                {
                    "step": 4,
                    "agent": "Writer",
                    "abduction": "copied 41",
                    "action": "write 51",
                    "prediction": "still wrong upstream",
                    "saves_run": False,
                },
                {
                    "step": 3,
                    "agent": "Checker",
                    "abduction": "did not recompute",
                    "action": "recompute",
                    "prediction": "finds 51",
                    "saves_run": True,
                },
                {
                    "step": 2,
                    "agent": "Calculator",
                    "abduction": "arithmetic slip",
                    "action": "compute 17*3=51",
                    "prediction": "team answers 51",
                    "saves_run": True,
                },
            ],
            "agent": "Checker",
            "step": 3,
            "reason": "the check failed",
        }
    )
    attribution, _ = await attribute("a2p", [reply])
    assert (attribution.agent, attribution.step) == ("Calculator", 2)
    assert attribution.suggested_fix == "compute 17*3=51"
    assert [c.step for c in attribution.candidates][:2] == [2, 3]


async def test_consensus_is_a_confidence_weighted_vote() -> None:
    votes = [
        answer({"agent": "Calculator", "step": 2, "confidence": 0.5, "evidence": "41"}),
        answer({"agent": "Checker", "step": 3, "confidence": 0.9, "evidence": "looks fine"}),
        answer({"agent": "Calculator", "step": 2, "confidence": 0.6, "evidence": "17*3"}),
    ]
    attribution, stub = await attribute("consensus", votes)
    assert (attribution.agent, attribution.step) == ("Calculator", 2)
    assert attribution.confidence == pytest.approx(1.1 / 2.0)
    assert [c.step for c in attribution.candidates] == [2, 3]
    stances = {r["messages"][0]["content"].split(":")[0] for r in stub.requests}
    assert len(stances) == 3


async def test_consensus_survives_a_failing_analyst() -> None:
    votes = [
        answer({"agent": "Calculator", "step": 2, "confidence": 0.7, "evidence": "41"}),
        error(401),
        answer({"agent": "Calculator", "step": 2, "confidence": 0.6, "evidence": "17*3"}),
    ]
    attribution, _ = await attribute("consensus", votes, retries=0)
    assert (attribution.agent, attribution.step) == ("Calculator", 2)
    assert len(attribution.details["failed_analysts"]) == 1


async def test_a_long_log_is_shortened_to_fit_and_the_details_say_so() -> None:
    trajectory = long_trajectory(40, 3000)
    settings: dict[str, Any] = {"context_tokens": 4096, "max_tokens": 256}
    pick = answer({"agent": "Coder", "step": 37, "reason": "late slip"})
    attribution, stub = await attribute("all_at_once", [pick], trajectory=trajectory, **settings)
    assert attribution.status is AttributionStatus.OK and attribution.step == 37
    prompt = "".join(m["content"] for m in stub.requests[0]["messages"])
    assert len(prompt) < 4096 * 4
    # Every step keeps its numbered line and the end of its text; nothing is cut off the end.
    for index in range(40):
        assert f"Step {index} - " in prompt
        assert f"end{index}" in prompt
    dropped = attribution.details["context_dropped"][0]
    assert dropped["shortened_steps"] == 40
    assert dropped["chars_dropped"] > 100_000
