"""Agno (a Team whose leader delegates to a member agent that calls a function tool), with
Agno's OpenAIChat model, traced by openinference-instrumentation-agno."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from agno.agent import Agent
from agno.models.openai import OpenAIChat
from agno.run import RunStatus
from agno.team import Team
from openinference.instrumentation.agno import AgnoInstrumentor

from tests.frameworks.harness import Expected, Pipeline, check_attributions, check_understood
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say
from tests.integration.sidecar import Sidecar

FRAMEWORK = "agno"
PROJECT = "conformance-agno"
TASK = "What is the population of Lyon?"
CENSUS = "Lyon: 522,250 inhabitants (census 2021)"
WRONG = "Lyon has 225,520 inhabitants."
"""The planted flaw: the researcher transposes the census figure's digits."""


@pytest.fixture(scope="module")
def pipeline(sidecar: Sidecar) -> Iterator[Pipeline]:
    pipeline = Pipeline(sidecar, PROJECT)
    AgnoInstrumentor().instrument(tracer_provider=pipeline.provider)
    try:
        yield pipeline
    finally:
        AgnoInstrumentor().uninstrument()
        pipeline.shutdown()


class CensusDown(RuntimeError):
    """The census service did not answer."""


def team(llm: ScriptedOpenAI, *, census_fails: bool = False) -> Team:
    """The coordinator (a Team's leader) and its member, the researcher, with the census
    tool."""

    def model() -> OpenAIChat:
        # No retries: a scripted 500 is the endpoint's one answer.
        return OpenAIChat(id="scripted", base_url=llm.base_url, api_key="x", max_retries=0)

    def census_lookup(city: str) -> str:
        """The population of a city from the national census."""
        if census_fails:
            raise CensusDown(f"census service timed out for {city}")
        return CENSUS

    researcher = Agent(
        name="researcher",
        role="Looks populations up in the census.",
        model=model(),
        tools=[census_lookup],
        instructions="RESEARCHER-ROLE: look populations up in the census.",
    )
    return Team(
        name="coordinator",
        members=[researcher],
        model=model(),
        instructions="COORDINATOR-ROLE: delegate population questions to the researcher.",
    )


def ask(leader: Team) -> Any:
    return leader.run(TASK)


def script() -> dict[str, list[Any]]:
    return {
        "COORDINATOR-ROLE": [
            call("delegate_task_to_member", member_id="researcher", task="Population of Lyon"),
            say(WRONG),
        ],
        "RESEARCHER-ROLE": [call("census_lookup", city="Lyon"), say(WRONG)],
    }


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before = pipeline.run_ids()
    with llm.running():
        output, error = pipeline.invoke(lambda: ask(team(llm)))
    assert error is None, error
    assert getattr(output, "status", None) == RunStatus.completed, output
    assert getattr(output, "content", None) == WRONG
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    expected = Expected(
        agents=["coordinator", "researcher"],
        task=TASK,
        tools={"census_lookup": "researcher", "delegate_task_to_member": "coordinator"},
        tool_results={"census_lookup": CENSUS},
        final_answer="225,520",
    )
    check_understood(run, expected, project=PROJECT)
    steps = run["trajectory"]["steps"]
    lookup = next(s for s in steps if s["tool_name"] == "census_lookup")
    assert "census_lookup(" in steps[lookup["index"] - 1]["content"], steps
    # The culprit: the researcher's reply right after the tool's result.
    culprit = steps[lookup["index"] + 1]
    assert (culprit["agent"], culprit["kind"]) == ("researcher", "llm"), culprit
    assert culprit["content"] == WRONG
    # The member's run is traced beside the leader's delegation, not beneath it: the
    # delegation's result (the member's answer) reads after the member gave it.
    delegation = next(s for s in steps if s["tool_name"] == "delegate_task_to_member")
    assert delegation["index"] > culprit["index"], steps
    assert delegation["content"] == WRONG
    pipeline.post_outcome(run["id"], outcome="failure", ground_truth="522,250")
    attributed = pipeline.the_run(before, statuses=("attributed",))
    check_attributions(attributed, ground_truth="522,250")


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"COORDINATOR-ROLE": [fail(500)]})
    before = pipeline.run_ids()
    with llm.running():
        output, error = pipeline.invoke(lambda: ask(team(llm)))
    # Agno catches the model's error: the run's output says so, nothing escapes.
    assert error is None, error
    assert getattr(output, "status", None) == RunStatus.error, output
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert run["agents"] == ["coordinator"], run["agents"]
    assert run["trajectory"]["task"] == TASK
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert failed and "500" in (failed[-1]["error"] or ""), failed
    # The failed root's output is the error's account, not an answer.
    assert not run["trajectory"]["final_answer"], run["trajectory"]["final_answer"]
    check_attributions(pipeline.the_run(before, statuses=("attributed",)), ground_truth=None)


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before = pipeline.run_ids()
    with llm.running():
        output, error = pipeline.invoke(lambda: ask(team(llm, census_fails=True)))
    # Agno feeds the tool's error back to the model, which answers.
    assert error is None, error
    assert getattr(output, "status", None) == RunStatus.completed, output
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    assert sorted(run["agents"]) == ["coordinator", "researcher"], run["agents"]
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert [(s["agent"], s["tool_name"]) for s in failed] == [("researcher", "census_lookup")]
    assert "census service timed out" in (failed[0]["error"] or "")
