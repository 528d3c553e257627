"""smolagents (a manager with a managed agent, tool-calling agents), traced by
openinference-instrumentation-smolagents."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from smolagents import OpenAIServerModel, ToolCallingAgent, tool

from tests.frameworks.harness import Expected, Pipeline, check_attributions, check_understood
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail
from tests.integration.sidecar import Sidecar

PROJECT = "conformance-smolagents"
TASK = "What is the population of Lyon?"
CENSUS = "Lyon: 522,250 inhabitants (census 2021)"


@pytest.fixture(scope="module")
def pipeline(sidecar: Sidecar) -> Iterator[Pipeline]:
    pipeline = Pipeline(sidecar, PROJECT)
    SmolagentsInstrumentor().instrument(tracer_provider=pipeline.provider)
    try:
        yield pipeline
    finally:
        SmolagentsInstrumentor().uninstrument()
        pipeline.shutdown()


class CensusDown(RuntimeError):
    """The census service did not answer."""


def team(llm: ScriptedOpenAI, *, census_fails: bool = False) -> ToolCallingAgent:
    model = OpenAIServerModel(model_id="scripted", api_base=llm.base_url, api_key="scripted")

    @tool
    def census_lookup(city: str) -> str:
        """The population of a city from the national census.

        Args:
            city: the city's name
        """
        if census_fails:
            raise CensusDown(f"census service timed out for {city}")
        return CENSUS

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


def manager_delegates() -> list:
    return [
        call("census_agent", task="Population of Lyon from the census"),
        call("final_answer", answer="Lyon has 225,520 inhabitants."),
    ]


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(
        {
            "MANAGER-ROLE": manager_delegates(),
            "CENSUS-ROLE": [
                call("census_lookup", city="Lyon"),
                # The planted flaw: the digits of the census figure, transposed.
                call("final_answer", answer="Lyon has 225,520 inhabitants."),
            ],
        }
    )
    before = pipeline.run_ids()
    with llm.running():
        answer, error = pipeline.invoke(lambda: team(llm).run(TASK))
    assert error is None and "225,520" in str(answer)
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    expected = Expected(
        agents=["manager", "census_agent"],
        task=TASK,
        tools={"census_lookup": "census_agent"},
        tool_results={"census_lookup": CENSUS},
        final_answer="225,520",
    )
    check_understood(run, expected, project=PROJECT)
    pipeline.post_outcome(run["id"], outcome="failure", ground_truth="522,250")
    attributed = pipeline.the_run(before, statuses=("attributed",))
    check_attributions(attributed, ground_truth="522,250")


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"MANAGER-ROLE": [fail(500)]})
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: team(llm).run(TASK))
    assert error is not None
    # The instrumentor never ends the manager's span when the model call fails, so the run
    # has no root and no span names its agent: the program that sent the spans stands in
    # for it (never a span's name such as `OpenAIModel.generate` or `Step 1`).
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert run["agents"] == [f"{PROJECT}-agents"], run["agents"]
    (failed,) = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert failed["kind"] == "llm" and "500" in (failed["error"] or ""), failed
    check_attributions(pipeline.the_run(before, statuses=("attributed",)), ground_truth=None)


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(
        {
            "MANAGER-ROLE": manager_delegates(),
            "CENSUS-ROLE": [
                call("census_lookup", city="Lyon"),
                call("final_answer", answer="Lyon has 225,520 inhabitants."),
            ],
        }
    )
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: team(llm, census_fails=True).run(TASK))
    assert error is None  # smolagents feeds the tool's error back to the model
    run = pipeline.the_run(before, statuses=("complete",))
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert [(s["agent"], s["tool_name"]) for s in failed] == [("census_agent", "census_lookup")]
    assert "census service timed out" in (failed[0]["error"] or "")
