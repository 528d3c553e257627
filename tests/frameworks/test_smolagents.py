"""smolagents (a manager with a managed agent, tool-calling agents), traced by
openinference-instrumentation-smolagents."""

from __future__ import annotations

from typing import Any

from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from smolagents import OpenAIServerModel, ToolCallingAgent, tool

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, Pipeline
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail

PROJECT = "conformance-smolagents"

pipeline = harness.pipeline_fixture(PROJECT, SmolagentsInstrumentor())


class Interrupted(BaseException):
    """What a tool raises that no agent catches (as a KeyboardInterrupt or a cancellation
    does): it escapes the managed agent's run and the manager's."""


def team(
    llm: ScriptedOpenAI, *, census_fails: bool = False, census_escapes: bool = False
) -> ToolCallingAgent:
    model = OpenAIServerModel(model_id="scripted", api_base=llm.base_url, api_key="scripted")

    @tool
    def census_lookup(city: str) -> str:
        """The population of a city from the national census.

        Args:
            city: the city's name
        """
        if census_escapes:
            raise Interrupted(harness.TIMED_OUT)
        return harness.census_answer(city, fails=census_fails)

    census = ToolCallingAgent(
        tools=[census_lookup],
        model=model,
        name="census_agent",
        description="Looks up populations in the census.",
        instructions="CENSUS-ROLE: answer from the census only.",
        max_steps=3,
    )
    return ToolCallingAgent(
        tools=[],
        model=model,
        managed_agents=[census],
        name="manager",
        instructions="MANAGER-ROLE: delegate population questions.",
        max_steps=3,
    )


def script() -> dict[str, list[Any]]:
    return {
        "MANAGER-ROLE": [
            call("census_agent", task="Population of Lyon from the census"),
            call("final_answer", answer=WRONG),
        ],
        "CENSUS-ROLE": [
            call("census_lookup", city="Lyon"),
            # The planted flaw: the census agent misstates the figure.
            call("final_answer", answer=WRONG),
        ],
    }


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    expected = harness.expected_census(
        agents=["manager", "census_agent"], tools={"census_lookup": "census_agent"}
    )
    graded = harness.graded_wrong_claim(pipeline, llm, lambda: team(llm).run(TASK), expected)
    assert "225,520" in str(graded.answer)


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"MANAGER-ROLE": [fail(500)]})
    before, _, error = pipeline.serving(llm, lambda: team(llm).run(TASK))
    assert error is not None
    # The instrumentor never ends the manager's span when the model call fails, so the run
    # has no root and no span names its agent: the program that sent the spans stands in
    # for it (never a span's name such as `OpenAIModel.generate` or `Step 1`).
    run, _ = pipeline.the_failed_run(before, agents=[f"{PROJECT}-agents"])
    (failed,) = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert failed["kind"] == "llm" and "500" in (failed["error"] or ""), failed


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before, _, error = pipeline.serving(llm, lambda: team(llm, census_fails=True).run(TASK))
    assert error is None  # smolagents feeds the tool's error back to the model
    run = pipeline.the_run(before, statuses=("complete",))
    failed = harness.failed_tool_step(run, "census_agent")
    assert TIMED_OUT in (failed["error"] or "")


def test_an_exception_escaping_both_agents_keeps_their_names_and_the_task(
    pipeline: Pipeline,
) -> None:
    llm = ScriptedOpenAI(script())

    def work() -> object:
        try:
            return team(llm, census_escapes=True).run(TASK)
        except Interrupted as exc:
            raise RuntimeError("the census lookup was interrupted") from exc

    before, _, error = pipeline.serving(llm, work)
    assert error is not None
    # Neither agent's span ends, so neither arrives: only their steps' spans do. The
    # managed agent is named by the task its manager gave it; nothing that arrived names
    # the manager, so the program that sent the spans stands in for it.
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert sorted(run["agents"]) == sorted([f"{PROJECT}-agents", "census_agent"]), run["agents"]
    assert run["trajectory"]["task"] == TASK, run["trajectory"]["task"]
