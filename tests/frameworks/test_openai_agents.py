"""The OpenAI Agents SDK (a triage agent handing off to a specialist that calls a function
tool), traced by openinference-instrumentation-openai-agents."""

from __future__ import annotations

from collections.abc import Iterator

import agents
import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    Runner,
    function_tool,
)
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

from tests.frameworks.harness import Expected, Pipeline, check_attributions, check_understood
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say
from tests.integration.sidecar import Sidecar

FRAMEWORK = "openai-agents"
PROJECT = "conformance-openai-agents"
TASK = "What is the population of Lyon?"
CENSUS = "Lyon: 522,250 inhabitants (census 2021)"


@pytest.fixture(scope="module")
def pipeline(sidecar: Sidecar) -> Iterator[Pipeline]:
    pipeline = Pipeline(sidecar, PROJECT)
    # Only the OpenInference processor runs: the SDK's own one exports to OpenAI.
    agents.set_trace_processors([])
    OpenAIAgentsInstrumentor().instrument(tracer_provider=pipeline.provider)
    try:
        yield pipeline
    finally:
        OpenAIAgentsInstrumentor().uninstrument()
        pipeline.shutdown()


class CensusDown(RuntimeError):
    """The census service did not answer."""


def triage(llm: ScriptedOpenAI, *, census_fails: bool = False, escapes: bool = False) -> Agent:
    """The triage agent; `census_fails`: the census tool raises; `escapes`: its error is
    not fed back to the model but ends the run."""
    # No retries: a scripted 500 is the endpoint's one answer.
    client = AsyncOpenAI(base_url=llm.base_url, api_key="scripted", max_retries=0)
    model = OpenAIChatCompletionsModel(model="scripted", openai_client=client)

    def tell_the_model(context: RunContextWrapper[object], error: Exception) -> str:
        return f"census_lookup failed: {error}"

    # The SDK's default error function hides the error from the model and the trace.
    @function_tool(failure_error_function=None if escapes else tell_the_model)
    def census_lookup(city: str) -> str:
        """The population of a city from the national census.

        Args:
            city: the city's name
        """
        if census_fails:
            raise CensusDown(f"census service timed out for {city}")
        return CENSUS

    census = Agent(
        name="census_agent",
        handoff_description="Looks up populations in the census.",
        instructions="CENSUS-ROLE: answer from the census only.",
        tools=[census_lookup],
        model=model,
    )
    return Agent(
        name="triage",
        instructions="TRIAGE-ROLE: hand population questions off.",
        handoffs=[census],
        model=model,
    )


def census_script() -> dict[str, list]:
    return {
        "TRIAGE-ROLE": [call("transfer_to_census_agent")],
        "CENSUS-ROLE": [
            call("census_lookup", city="Lyon"),
            # The planted flaw: the digits of the census figure, transposed.
            say("Lyon has 225,520 inhabitants."),
        ],
    }


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(census_script())
    before = pipeline.run_ids()
    with llm.running():
        result, error = pipeline.invoke(lambda: Runner.run_sync(triage(llm), TASK))
    assert error is None, error
    assert "225,520" in str(result.final_output)  # type: ignore[attr-defined]
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    expected = Expected(
        agents=["triage", "census_agent"],
        task=TASK,
        tools={"census_lookup": "census_agent"},
        tool_results={"census_lookup": CENSUS},
        final_answer="225,520",
    )
    check_understood(run, expected, project=PROJECT)
    steps = run["trajectory"]["steps"]
    # The handoff is triage's step, and the wrong claim census_agent's last one.
    assert any(
        s["agent"] == "triage" and "transfer_to_census_agent(" in s["content"] for s in steps
    ), steps
    assert steps[-1]["agent"] == "census_agent" and "225,520" in steps[-1]["content"]
    pipeline.post_outcome(run["id"], outcome="failure", ground_truth="522,250")
    attributed = pipeline.the_run(before, statuses=("attributed",))
    check_attributions(attributed, ground_truth="522,250")


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"TRIAGE-ROLE": [fail(500)]})
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: Runner.run_sync(triage(llm), TASK))
    assert error is not None
    # The SDK's trace (the root) ends OK; the agent and its model call end in ERROR.
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert run["agents"] == ["triage"], run["agents"]
    check_attributions(pipeline.the_run(before, statuses=("attributed",)), ground_truth=None)


def test_a_raising_tool_that_ends_the_run_fails_it(pipeline: Pipeline) -> None:
    script = census_script()
    script["CENSUS-ROLE"] = script["CENSUS-ROLE"][:1]
    llm = ScriptedOpenAI(script)
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(
            lambda: Runner.run_sync(triage(llm, census_fails=True, escapes=True), TASK)
        )
    assert error is not None and "census service timed out" in str(error)
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert sorted(run["agents"]) == ["census_agent", "triage"], run["agents"]
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert [(s["agent"], s["tool_name"]) for s in failed] == [("census_agent", "census_lookup")]
    attributed = check_attributions(
        pipeline.the_run(before, statuses=("attributed",)), ground_truth=None
    )
    assert attributed["first_error"]["agent"] == "census_agent"


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(census_script())
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: Runner.run_sync(triage(llm, census_fails=True), TASK))
    assert error is None  # the SDK feeds the tool's error back to the model
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert [(s["agent"], s["tool_name"]) for s in failed] == [("census_agent", "census_lookup")]
    assert "census service timed out" in (failed[0]["error"] or "")
