"""BeeAI (a RequirementAgent handing the task off to a second RequirementAgent, which calls a
function tool; answers are given through BeeAI's `final_answer` tool), with BeeAI's
OpenAIChatModel (LiteLLM underneath), traced by openinference-instrumentation-beeai."""

from __future__ import annotations

import asyncio
from typing import Any

from beeai_framework.adapters.openai import OpenAIChatModel
from beeai_framework.agents.requirement import RequirementAgent
from beeai_framework.tools import tool
from beeai_framework.tools.handoff import HandoffTool
from openinference.instrumentation.beeai import BeeAIInstrumentor

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, Pipeline
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail

PROJECT = "conformance-beeai"

pipeline = harness.pipeline_fixture(PROJECT, BeeAIInstrumentor())


def coordinator(llm: ScriptedOpenAI, *, census_fails: bool = False) -> RequirementAgent:
    """The coordinator, handing population questions off to the researcher (its tool)."""

    def model() -> OpenAIChatModel:
        return OpenAIChatModel("scripted", base_url=llm.base_url, api_key="x")

    @tool
    def census_lookup(city: str) -> str:
        """The population of a city from the national census.

        Args:
            city: the city's name
        """
        return harness.census_answer(city, fails=census_fails)

    researcher = RequirementAgent(
        name="researcher",
        description="Looks populations up in the census.",
        llm=model(),
        tools=[census_lookup],
        instructions="RESEARCHER-ROLE: look populations up in the census.",
    )
    return RequirementAgent(
        name="coordinator",
        llm=model(),
        tools=[HandoffTool(researcher)],
        instructions="COORDINATOR-ROLE: delegate population questions to the researcher.",
    )


def ask(agent: RequirementAgent) -> str:
    async def asking() -> str:
        # No retries: a scripted 500 is the endpoint's one answer.
        output = await agent.run(TASK, max_retries_per_step=0, total_max_retries=0)
        return output.last_message.text

    return asyncio.run(asking())


def answer(text: str) -> Any:
    """A RequirementAgent answers by calling its `final_answer` tool."""
    return call("final_answer", response=text)


def script() -> dict[str, list[Any]]:
    return {
        "COORDINATOR-ROLE": [call("researcher", task="Population of Lyon"), answer(WRONG)],
        # The planted flaw: the researcher misstates the figure.
        "RESEARCHER-ROLE": [call("census_lookup", city="Lyon"), answer(WRONG)],
    }


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    expected = harness.expected_census(
        agents=["coordinator", "researcher"], tools={"census_lookup": "researcher"}
    )
    graded = harness.graded_wrong_claim(pipeline, llm, lambda: ask(coordinator(llm)), expected)
    assert graded.answer == WRONG
    steps = graded.steps
    # The hand-off reads as the coordinator's call of the researcher.
    handoff = [s for s in steps if "researcher(" in s["content"]]
    assert [s["agent"] for s in handoff] == ["coordinator"], handoff
    lookup = next(s for s in steps if s["tool_name"] == "census_lookup")
    # The culprit: the researcher's reply right after the tool's result.
    culprit = steps[lookup["index"] + 1]
    assert (culprit["agent"], culprit["kind"]) == ("researcher", "llm"), culprit
    assert "225,520" in culprit["content"]


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"COORDINATOR-ROLE": [fail(500)]})
    before, _, error = pipeline.serving(llm, lambda: ask(coordinator(llm)))
    assert error is not None
    assert len(llm.requests) == 1, len(llm.requests)
    run, _ = pipeline.the_failed_run(before, agents=["coordinator"])
    assert run["trajectory"]["task"] == TASK
    failed = harness.error_steps(run)
    assert [(s["agent"], s["kind"]) for s in failed] == [("coordinator", "llm")], failed
    # The failed root's output is the error's account, not an answer.
    assert not run["trajectory"]["final_answer"], run["trajectory"]["final_answer"]


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before, output, error = pipeline.serving(llm, lambda: ask(coordinator(llm, census_fails=True)))
    # BeeAI feeds the tool's error back to the model, which answers.
    assert error is None, error
    assert output == WRONG
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    assert sorted(run["agents"]) == ["coordinator", "researcher"], run["agents"]
    failed = harness.failed_tool_step(run, "researcher")
    # BeeAI wraps the tool's exception (`ToolError`); the step's content tells its cause.
    assert failed["error"], failed
    assert TIMED_OUT in failed["content"], failed
