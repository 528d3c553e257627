"""Agno (a Team whose leader delegates to a member agent that calls a function tool), with
Agno's OpenAIChat model, traced by openinference-instrumentation-agno (`agno`) or by
Traceloop OpenLLMetry's Agno and openai client instrumentations (`agno+openllmetry`, as
`Traceloop.init()` sets them up). `FAULTFINDER_CONFORMANCE_FRAMEWORK` (set by noxfile.py)
says which one runs."""

from __future__ import annotations

from typing import Any

from agno.agent import Agent
from agno.models.openai import OpenAIChat
from agno.run import RunStatus
from agno.team import Team

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, Pipeline
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say

FRAMEWORK, PROJECT = harness.framework_under_test("agno")

if FRAMEWORK == "agno+openllmetry":
    # As Traceloop.init() sets it up: the framework's and the openai client's.
    from opentelemetry.instrumentation.agno import AgnoInstrumentor as TraceloopAgnoInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    pipeline = harness.pipeline_fixture(PROJECT, TraceloopAgnoInstrumentor(), OpenAIInstrumentor())
else:
    from openinference.instrumentation.agno import AgnoInstrumentor

    pipeline = harness.pipeline_fixture(PROJECT, AgnoInstrumentor())


def team(llm: ScriptedOpenAI, *, census_fails: bool = False) -> Team:
    """The coordinator (a Team's leader) and its member, the researcher, with the census
    tool."""

    def model() -> OpenAIChat:
        # No retries: a scripted 500 is the endpoint's one answer.
        return OpenAIChat(id="scripted", base_url=llm.base_url, api_key="x", max_retries=0)

    def census_lookup(city: str) -> str:
        """The population of a city from the national census."""
        return harness.census_answer(city, fails=census_fails)

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
        # The planted flaw: the researcher misstates the figure.
        "RESEARCHER-ROLE": [call("census_lookup", city="Lyon"), say(WRONG)],
    }


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    expected = harness.expected_census(
        agents=["coordinator", "researcher"],
        tools={"census_lookup": "researcher", "delegate_task_to_member": "coordinator"},
    )
    graded = harness.graded_wrong_claim(pipeline, llm, lambda: ask(team(llm)), expected)
    assert getattr(graded.answer, "status", None) == RunStatus.completed, graded.answer
    assert getattr(graded.answer, "content", None) == WRONG
    steps = graded.steps
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


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"COORDINATOR-ROLE": [fail(500)]})
    before, output, error = pipeline.serving(llm, lambda: ask(team(llm)))
    # Agno catches the model's error: the run's output says so, nothing escapes.
    assert error is None, error
    assert getattr(output, "status", None) == RunStatus.error, output
    run, _ = pipeline.the_failed_run(before, agents=["coordinator"])
    assert run["trajectory"]["task"] == TASK
    failed = harness.error_steps(run)
    assert failed and "500" in (failed[-1]["error"] or ""), failed
    # The failed root's output is the error's account, not an answer.
    assert not run["trajectory"]["final_answer"], run["trajectory"]["final_answer"]


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before, output, error = pipeline.serving(llm, lambda: ask(team(llm, census_fails=True)))
    # Agno feeds the tool's error back to the model, which answers.
    assert error is None, error
    assert getattr(output, "status", None) == RunStatus.completed, output
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    assert sorted(run["agents"]) == ["coordinator", "researcher"], run["agents"]
    if FRAMEWORK == "agno+openllmetry":
        # OpenLLMetry's tool span says OK and carries no result or error in any convention
        # (only Agno's own repr): the call is read from the next model call's input, where
        # the error is the tool's report, with no status to say it failed.
        (call,) = [s for s in run["trajectory"]["steps"] if s["tool_name"] == "census_lookup"]
        assert call["agent"] == "researcher" and TIMED_OUT in call["content"], call
        assert call["status"] == "unset", call
        return
    failed = harness.failed_tool_step(run, "researcher")
    assert TIMED_OUT in (failed["error"] or "")
