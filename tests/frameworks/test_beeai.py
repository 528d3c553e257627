"""BeeAI (a RequirementAgent handing the task off to a second RequirementAgent, which calls a
function tool; answers are given through BeeAI's `final_answer` tool), with BeeAI's
OpenAIChatModel (LiteLLM underneath), traced by openinference-instrumentation-beeai."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from beeai_framework.adapters.openai import OpenAIChatModel
from beeai_framework.agents.requirement import RequirementAgent
from beeai_framework.tools import tool
from beeai_framework.tools.handoff import HandoffTool
from openinference.instrumentation.beeai import BeeAIInstrumentor

from tests.frameworks.harness import Expected, Pipeline, check_attributions, check_understood
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail
from tests.integration.sidecar import Sidecar

FRAMEWORK = "beeai"
PROJECT = "conformance-beeai"
TASK = "What is the population of Lyon?"
CENSUS = "Lyon: 522,250 inhabitants (census 2021)"
WRONG = "Lyon has 225,520 inhabitants."
"""The planted flaw: the researcher transposes the census figure's digits."""


@pytest.fixture(scope="module")
def pipeline(sidecar: Sidecar) -> Iterator[Pipeline]:
    pipeline = Pipeline(sidecar, PROJECT)
    BeeAIInstrumentor().instrument(tracer_provider=pipeline.provider)
    try:
        yield pipeline
    finally:
        BeeAIInstrumentor().uninstrument()
        pipeline.shutdown()


class CensusDown(RuntimeError):
    """The census service did not answer."""


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
        if census_fails:
            raise CensusDown(f"census service timed out for {city}")
        return CENSUS

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
        "RESEARCHER-ROLE": [call("census_lookup", city="Lyon"), answer(WRONG)],
    }


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before = pipeline.run_ids()
    with llm.running():
        output, error = pipeline.invoke(lambda: ask(coordinator(llm)))
    assert error is None, error
    assert output == WRONG
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    expected = Expected(
        agents=["coordinator", "researcher"],
        task=TASK,
        tools={"census_lookup": "researcher"},
        tool_results={"census_lookup": CENSUS},
        final_answer="225,520",
    )
    check_understood(run, expected, project=PROJECT)
    steps = run["trajectory"]["steps"]
    # The hand-off reads as the coordinator's call of the researcher.
    handoff = [s for s in steps if "researcher(" in s["content"]]
    assert [s["agent"] for s in handoff] == ["coordinator"], handoff
    lookup = next(s for s in steps if s["tool_name"] == "census_lookup")
    # The culprit: the researcher's reply right after the tool's result.
    culprit = steps[lookup["index"] + 1]
    assert (culprit["agent"], culprit["kind"]) == ("researcher", "llm"), culprit
    assert "225,520" in culprit["content"]
    pipeline.post_outcome(run["id"], outcome="failure", ground_truth="522,250")
    attributed = pipeline.the_run(before, statuses=("attributed",))
    check_attributions(attributed, ground_truth="522,250")


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"COORDINATOR-ROLE": [fail(500)]})
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: ask(coordinator(llm)))
    assert error is not None
    assert len(llm.requests) == 1, len(llm.requests)
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert run["agents"] == ["coordinator"], run["agents"]
    assert run["trajectory"]["task"] == TASK
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert [(s["agent"], s["kind"]) for s in failed] == [("coordinator", "llm")], failed
    # The failed root's output is the error's account, not an answer.
    assert not run["trajectory"]["final_answer"], run["trajectory"]["final_answer"]
    check_attributions(pipeline.the_run(before, statuses=("attributed",)), ground_truth=None)


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before = pipeline.run_ids()
    with llm.running():
        output, error = pipeline.invoke(lambda: ask(coordinator(llm, census_fails=True)))
    # BeeAI feeds the tool's error back to the model, which answers.
    assert error is None, error
    assert output == WRONG
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    assert sorted(run["agents"]) == ["coordinator", "researcher"], run["agents"]
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert [(s["agent"], s["tool_name"]) for s in failed] == [("researcher", "census_lookup")]
    # BeeAI wraps the tool's exception (`ToolError`); the step's content tells its cause.
    assert failed[0]["error"], failed
    assert "census service timed out" in failed[0]["content"], failed
