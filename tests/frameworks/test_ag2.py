"""AG2 (a coordinator delegating to a researcher agent exposed as its tool; the researcher
calls a function tool), traced by AG2's own OpenTelemetry middleware
(`ag2.middleware.TelemetryMiddleware`, GenAI semantic conventions: `invoke_agent`,
`chat` with OpenAI-shaped `gen_ai.*.messages`, `execute_tool`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from ag2 import Agent
from ag2.config.openai import OpenAIConfig
from ag2.middleware import TelemetryMiddleware

from tests.frameworks.harness import Expected, Pipeline, check_attributions, check_understood
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say
from tests.integration.sidecar import Sidecar

FRAMEWORK = "ag2"
PROJECT = "conformance-ag2"
TASK = "What is the population of Lyon?"
CENSUS = "Lyon: 522,250 inhabitants (census 2021)"
WRONG = "Lyon has 225,520 inhabitants."


@pytest.fixture(scope="module")
def pipeline(sidecar: Sidecar) -> Iterator[Pipeline]:
    pipeline = Pipeline(sidecar, PROJECT)
    try:
        yield pipeline
    finally:
        pipeline.shutdown()


class CensusDown(RuntimeError):
    """The census service did not answer."""


def team(pipeline: Pipeline, llm: ScriptedOpenAI, *, census_fails: bool = False) -> Agent:
    config = OpenAIConfig(model="scripted", base_url=llm.base_url, api_key="x", max_retries=0)

    def traced(name: str) -> TelemetryMiddleware:
        return TelemetryMiddleware(
            tracer_provider=pipeline.provider, agent_name=name, provider_name="openai"
        )

    def census_lookup(city: str) -> str:
        """The population of a city from the national census."""
        if census_fails:
            raise CensusDown(f"census service timed out for {city}")
        return CENSUS

    researcher = Agent(
        "researcher",
        "RESEARCHER-ROLE: look populations up in the census.",
        config=config,
        tools=[census_lookup],
        middleware=[traced("researcher")],
    )
    return Agent(
        "coordinator",
        "COORDINATOR-ROLE: delegate population questions to the researcher.",
        config=config,
        tools=[researcher.as_tool(description="Looks populations up in the census.")],
        middleware=[traced("coordinator")],
    )


def ask(agent: Agent) -> str | None:
    async def asking() -> str | None:
        reply = await agent.ask(TASK)
        return reply.body

    return asyncio.run(asking())


def coordinator_delegates() -> list:
    return [call("task_researcher", objective="Population of Lyon from the census"), say(WRONG)]


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(
        {
            "COORDINATOR-ROLE": coordinator_delegates(),
            "RESEARCHER-ROLE": [
                call("census_lookup", city="Lyon"),
                # The planted flaw: the digits of the census figure, transposed.
                say(WRONG),
            ],
        }
    )
    before = pipeline.run_ids()
    with llm.running():
        answer, error = pipeline.invoke(lambda: ask(team(pipeline, llm)))
    assert error is None, error
    assert "225,520" in str(answer)
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
    # The model turns that only call a tool read as the call (`content: null` beside
    # OpenAI-shaped `tool_calls`), by the agent that made it.
    delegation = [s for s in steps if "task_researcher(" in s["content"]]
    assert [s["agent"] for s in delegation] == ["coordinator"], delegation
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
        _, error = pipeline.invoke(lambda: ask(team(pipeline, llm)))
    assert error is not None
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert run["agents"] == ["coordinator"], run["agents"]
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert failed and "500" in (failed[-1]["error"] or ""), failed
    check_attributions(pipeline.the_run(before, statuses=("attributed",)), ground_truth=None)


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(
        {
            "COORDINATOR-ROLE": coordinator_delegates(),
            "RESEARCHER-ROLE": [call("census_lookup", city="Lyon"), say(WRONG)],
        }
    )
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: ask(team(pipeline, llm, census_fails=True)))
    assert error is None  # AG2 feeds the tool's error back to the model
    run = pipeline.the_run(before, statuses=("complete",))
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert [(s["agent"], s["tool_name"]) for s in failed] == [("researcher", "census_lookup")]
    assert "census service timed out" in (failed[0]["error"] or "")
