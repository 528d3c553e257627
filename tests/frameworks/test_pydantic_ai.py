"""pydantic-ai (an orchestrator whose tool delegates to a second agent that calls a
function tool), traced by pydantic-ai's own instrumentation (`Agent.instrument_all`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai import AsyncOpenAI
from pydantic_ai import Agent, InstrumentationSettings, ModelRetry, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.frameworks.harness import Expected, Pipeline, check_attributions, check_understood
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say
from tests.integration.sidecar import Sidecar

FRAMEWORK = "pydantic-ai"
PROJECT = "conformance-pydantic-ai"
TASK = "What is the population of Lyon?"
CENSUS = "Lyon: 522,250 inhabitants (census 2021)"


@pytest.fixture(scope="module")
def pipeline(sidecar: Sidecar) -> Iterator[Pipeline]:
    pipeline = Pipeline(sidecar, PROJECT)
    Agent.instrument_all(InstrumentationSettings(tracer_provider=pipeline.provider))
    try:
        yield pipeline
    finally:
        Agent.instrument_all(False)
        pipeline.shutdown()


class CensusDown(RuntimeError):
    """The census service did not answer."""


def orchestrator(
    llm: ScriptedOpenAI, *, census_fails: bool = False, retry: bool = False
) -> Agent[None, str]:
    """The orchestrator; `census_fails`: the census tool raises; `retry`: it asks the model
    to try again (`ModelRetry`, fed back) instead of ending the run."""
    # No retries: a scripted 500 is the endpoint's one answer.
    client = AsyncOpenAI(base_url=llm.base_url, api_key="scripted", max_retries=0)
    model = OpenAIChatModel("scripted", provider=OpenAIProvider(openai_client=client))
    census = Agent(
        model,
        name="census_agent",
        instructions="CENSUS-ROLE: answer from the census only.",
        output_type=str,
    )

    @census.tool_plain
    def census_lookup(city: str) -> str:
        """The population of a city from the national census."""
        if census_fails and retry:
            raise ModelRetry(f"census service timed out for {city}")
        if census_fails:
            raise CensusDown(f"census service timed out for {city}")
        return CENSUS

    lead = Agent(
        model,
        name="orchestrator",
        instructions="ORCHESTRATOR-ROLE: delegate population questions to the census agent.",
        output_type=str,
    )

    @lead.tool
    async def ask_census_agent(context: RunContext[None], question: str) -> str:
        """Ask the census agent a population question."""
        result = await census.run(question, usage=context.usage)
        return result.output

    return lead


def census_script() -> dict[str, list]:
    return {
        "ORCHESTRATOR-ROLE": [
            call("ask_census_agent", question="Population of Lyon from the census"),
            say("Lyon has 225,520 inhabitants."),
        ],
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
        result, error = pipeline.invoke(lambda: orchestrator(llm).run_sync(TASK))
    assert error is None, error
    assert "225,520" in result.output  # type: ignore[attr-defined]
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    expected = Expected(
        agents=["orchestrator", "census_agent"],
        task=TASK,
        # The delegating tool holds the census agent's run: a container, not a step.
        tools={"census_lookup": "census_agent"},
        tool_results={"census_lookup": CENSUS},
        final_answer="225,520",
    )
    check_understood(run, expected, project=PROJECT)
    steps = run["trajectory"]["steps"]
    assert "ask_census_agent" not in run["agents"]
    assert steps[0]["agent"] == "orchestrator" and "ask_census_agent(" in steps[0]["content"]
    # The wrong claim is the census agent's, right after its tool's result.
    (lookup,) = [s for s in steps if s.get("tool_name") == "census_lookup"]
    claim = steps[lookup["index"] + 1]
    assert claim["agent"] == "census_agent" and "225,520" in claim["content"], claim
    pipeline.post_outcome(run["id"], outcome="failure", ground_truth="522,250")
    attributed = pipeline.the_run(before, statuses=("attributed",))
    check_attributions(attributed, ground_truth="522,250")


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"ORCHESTRATOR-ROLE": [fail(500)]})
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: orchestrator(llm).run_sync(TASK))
    assert error is not None
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert run["agents"] == ["orchestrator"], run["agents"]
    check_attributions(pipeline.the_run(before, statuses=("attributed",)), ground_truth=None)


def test_a_raising_tool_that_ends_the_run_fails_it(pipeline: Pipeline) -> None:
    script = census_script()
    script["ORCHESTRATOR-ROLE"] = script["ORCHESTRATOR-ROLE"][:1]
    script["CENSUS-ROLE"] = script["CENSUS-ROLE"][:1]
    llm = ScriptedOpenAI(script)
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: orchestrator(llm, census_fails=True).run_sync(TASK))
    assert isinstance(error, CensusDown), error
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert sorted(run["agents"]) == ["census_agent", "orchestrator"], run["agents"]
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert ("census_agent", "census_lookup") in [(s["agent"], s["tool_name"]) for s in failed]
    attributed = check_attributions(
        pipeline.the_run(before, statuses=("attributed",)), ground_truth=None
    )
    assert attributed["first_error"]["agent"] == "census_agent"


def test_a_tool_asking_the_model_to_retry_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(census_script())
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(
            lambda: orchestrator(llm, census_fails=True, retry=True).run_sync(TASK)
        )
    # The census tool's error goes back to the model, which answers all the same.
    assert error is None, error
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    lookups = [s for s in run["trajectory"]["steps"] if s.get("tool_name") == "census_lookup"]
    assert {s["agent"] for s in lookups} == {"census_agent"}
    assert any("census service timed out" in (s["content"] + (s["error"] or "")) for s in lookups)
    assert "225,520" in (run["trajectory"]["final_answer"] or "")
