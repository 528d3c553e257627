"""AG2 (a coordinator delegating to a researcher agent exposed as its tool; the researcher
calls a function tool), traced by AG2's own OpenTelemetry middleware
(`ag2.middleware.TelemetryMiddleware`, GenAI semantic conventions: `invoke_agent`,
`chat` with OpenAI-shaped `gen_ai.*.messages`, `execute_tool`)."""

from __future__ import annotations

import asyncio
from typing import Any

from ag2 import Agent
from ag2.config.openai import OpenAIConfig
from ag2.middleware import TelemetryMiddleware

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, Pipeline
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say

PROJECT = "conformance-ag2"

# AG2 traces itself: each agent's middleware is given the pipeline's provider (`team`).
pipeline = harness.pipeline_fixture(PROJECT)


def team(pipeline: Pipeline, llm: ScriptedOpenAI, *, census_fails: bool = False) -> Agent:
    config = OpenAIConfig(model="scripted", base_url=llm.base_url, api_key="x", max_retries=0)

    def traced(name: str) -> TelemetryMiddleware:
        return TelemetryMiddleware(
            tracer_provider=pipeline.provider, agent_name=name, provider_name="openai"
        )

    def census_lookup(city: str) -> str:
        """The population of a city from the national census."""
        return harness.census_answer(city, fails=census_fails)

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


def script() -> dict[str, list[Any]]:
    return {
        "COORDINATOR-ROLE": [
            call("task_researcher", objective="Population of Lyon from the census"),
            say(WRONG),
        ],
        "RESEARCHER-ROLE": [
            call("census_lookup", city="Lyon"),
            # The planted flaw: the researcher misstates the figure.
            say(WRONG),
        ],
    }


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    expected = harness.expected_census(
        agents=["coordinator", "researcher"], tools={"census_lookup": "researcher"}
    )
    graded = harness.graded_wrong_claim(pipeline, llm, lambda: ask(team(pipeline, llm)), expected)
    assert "225,520" in str(graded.answer)
    steps = graded.steps
    # The model turns that only call a tool read as the call (`content: null` beside
    # OpenAI-shaped `tool_calls`), by the agent that made it.
    delegation = [s for s in steps if "task_researcher(" in s["content"]]
    assert [s["agent"] for s in delegation] == ["coordinator"], delegation
    lookup = next(s for s in steps if s["tool_name"] == "census_lookup")
    # The culprit: the researcher's reply right after the tool's result.
    culprit = steps[lookup["index"] + 1]
    assert (culprit["agent"], culprit["kind"]) == ("researcher", "llm"), culprit
    assert "225,520" in culprit["content"]


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"COORDINATOR-ROLE": [fail(500)]})
    before, _, error = pipeline.serving(llm, lambda: ask(team(pipeline, llm)))
    assert error is not None
    run, _ = pipeline.the_failed_run(before, agents=["coordinator"])
    failed = harness.error_steps(run)
    assert failed and "500" in (failed[-1]["error"] or ""), failed


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before, _, error = pipeline.serving(llm, lambda: ask(team(pipeline, llm, census_fails=True)))
    assert error is None  # AG2 feeds the tool's error back to the model
    run = pipeline.the_run(before, statuses=("complete",))
    failed = harness.failed_tool_step(run, "researcher")
    assert TIMED_OUT in (failed["error"] or "")
