"""Microsoft Agent Framework (a sequential workflow: a researcher with a function tool,
then a writer; an agent called as another agent's tool), with its OpenAI chat-completions
client, traced by the framework's own telemetry: no instrumentation package, the spans
the framework opens itself on the global tracer provider once instrumentation and
sensitive data are enabled (`enable_instrumentation`), messages in today's GenAI
attributes."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_framework import Agent
from agent_framework.observability import enable_instrumentation
from agent_framework.openai import OpenAIChatCompletionClient
from agent_framework.orchestrations import SequentialBuilder

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, Pipeline
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say

FRAMEWORK, PROJECT = harness.framework_under_test("agent-framework")

# The framework traces to the global provider by itself; message contents are recorded
# only with sensitive data enabled, as its documentation says to turn them on.
pipeline = harness.pipeline_fixture(PROJECT, global_provider=True)
enable_instrumentation(enable_sensitive_data=True)


def client(llm: ScriptedOpenAI) -> OpenAIChatCompletionClient:
    return OpenAIChatCompletionClient(model="scripted", api_key="x", base_url=llm.base_url)


def census_tool(*, fails: bool = False) -> Any:
    def census_lookup(city: str) -> str:
        """The population of a city from the national census."""
        return harness.census_answer(city, fails=fails)

    return census_lookup


def workflow(llm: ScriptedOpenAI, *, census_fails: bool = False) -> Any:
    researcher = Agent(
        client(llm),
        "RESEARCHER-ROLE: look figures up in the census.",
        name="researcher",
        tools=[census_tool(fails=census_fails)],
    )
    writer = Agent(client(llm), "WRITER-ROLE: write the answer for the reader.", name="writer")
    return SequentialBuilder(participants=[researcher, writer]).build()


def coordinator(llm: ScriptedOpenAI) -> Agent:
    """A coordinator that calls the researcher as one of its tools (`Agent.as_tool`)."""
    researcher = Agent(
        client(llm),
        "RESEARCHER-ROLE: look figures up in the census.",
        name="researcher",
        description="Looks figures up in the census.",
        tools=[census_tool()],
    )
    return Agent(
        client(llm),
        "COORDINATOR-ROLE: ask the researcher for figures.",
        name="coordinator",
        tools=[researcher.as_tool(name="ask_researcher")],
    )


def ask(flow: Any) -> Any:
    async def run() -> Any:
        return await flow.run(TASK)

    return asyncio.run(run())


def script() -> dict[str, list[Any]]:
    return {
        "RESEARCHER-ROLE": [
            call("census_lookup", city="Lyon"),
            say("The census gives Lyon 522,250 inhabitants."),
        ],
        # The planted flaw: the writer misstates the figure.
        "WRITER-ROLE": [say(WRONG)],
    }


def test_a_wrong_claim_in_a_sequential_workflow_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    expected = harness.expected_census(
        agents=["researcher", "writer"], tools={"census_lookup": "researcher"}
    )
    graded = harness.graded_wrong_claim(pipeline, llm, lambda: ask(workflow(llm)), expected)
    claim = next(s for s in graded.steps if s["content"] == WRONG and s["kind"] != "tool")
    assert claim["agent"] == "writer", claim


def test_an_agent_called_as_a_tool_is_an_agent_of_its_own(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(
        {
            "RESEARCHER-ROLE": [call("census_lookup", city="Lyon"), say(WRONG)],
            "COORDINATOR-ROLE": [call("ask_researcher", task="Population of Lyon?"), say(WRONG)],
        }
    )
    expected = harness.expected_census(
        agents=["coordinator", "researcher"],
        tools={"census_lookup": "researcher", "ask_researcher": "coordinator"},
    )
    graded = harness.graded_wrong_claim(
        pipeline, llm, lambda: asyncio.run(coordinator(llm).run(TASK)), expected
    )
    # The coordinator's output is its whole response (its call, the report, its answer):
    # the run's answer is the answer alone.
    assert graded.run["trajectory"]["final_answer"].strip() == WRONG
    steps = graded.steps
    lookup = next(s for s in steps if s["tool_name"] == "census_lookup")
    culprit = steps[lookup["index"] + 1]
    assert (culprit["agent"], culprit["content"]) == ("researcher", WRONG), culprit


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": [fail(500)]})
    before, output, error = pipeline.serving(llm, lambda: ask(workflow(llm)))
    run, _ = pipeline.the_failed_run(before, agents=["researcher"])
    assert run["trajectory"]["task"] == TASK
    failed = harness.error_steps(run)
    assert failed, run["trajectory"]["steps"]
    assert not run["trajectory"]["final_answer"], (output, error, run["trajectory"])


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before, _, error = pipeline.serving(llm, lambda: ask(workflow(llm, census_fails=True)))
    # The framework hands the tool's error to the model as the tool's result.
    assert error is None, error
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    assert sorted(run["agents"]) == ["researcher", "writer"], run["agents"]
    failed = harness.failed_tool_step(run, "researcher")
    assert TIMED_OUT in (failed["error"] or failed["content"]), failed
