"""Semantic Kernel (a coordinator ChatCompletionAgent that calls a researcher agent as one
of its plugins, the researcher with a census plugin), with its OpenAI chat-completion
connector, traced by the framework's own telemetry: no instrumentation package. Set up
as its documentation says: the experimental GenAI diagnostics (sensitive data included)
turned on, spans to the global tracer provider, and the messages, which it writes to
Python's logging as GenAI events, sent as OTLP log records by OpenTelemetry's logging
handler."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from typing import Any

# Read when Semantic Kernel is imported.
os.environ["SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS"] = "true"
os.environ["SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE"] = "true"

import pytest
from openai import AsyncOpenAI
from opentelemetry.sdk._logs import LoggingHandler
from semantic_kernel.agents import ChatCompletionAgent
from semantic_kernel.connectors.ai.open_ai import OpenAIChatCompletion
from semantic_kernel.functions import kernel_function

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, Pipeline
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say

FRAMEWORK, PROJECT = harness.framework_under_test("semantic-kernel")

pipeline = harness.pipeline_fixture(PROJECT, global_provider=True)


@pytest.fixture(scope="module", autouse=True)
def logged(pipeline: Pipeline) -> Iterator[None]:
    """Semantic Kernel's log records (its GenAI events) sent to the pipeline, as its
    documentation sets it up (on its own logger: the test runner owns the root's level)."""
    handler = LoggingHandler(logger_provider=pipeline.logs)
    kernel_logs = logging.getLogger("semantic_kernel")
    level = kernel_logs.level
    kernel_logs.addHandler(handler)
    kernel_logs.setLevel(logging.INFO)
    try:
        yield
    finally:
        kernel_logs.removeHandler(handler)
        kernel_logs.setLevel(level)


class Census:
    """The census plugin."""

    def __init__(self, *, fails: bool = False) -> None:
        self.fails = fails

    @kernel_function(description="The population of a city from the national census.")
    def census_lookup(self, city: str) -> str:
        return harness.census_answer(city, fails=self.fails)


def service(llm: ScriptedOpenAI) -> OpenAIChatCompletion:
    # No retries: a scripted 500 is the endpoint's one answer.
    client = AsyncOpenAI(base_url=llm.base_url, api_key="x", max_retries=0)
    return OpenAIChatCompletion(ai_model_id="scripted", async_client=client)


def coordinator(llm: ScriptedOpenAI, *, census_fails: bool = False) -> ChatCompletionAgent:
    researcher = ChatCompletionAgent(
        service=service(llm),
        name="researcher",
        description="Looks figures up in the census.",
        instructions="RESEARCHER-ROLE: look figures up in the census.",
        plugins=[Census(fails=census_fails)],
    )
    return ChatCompletionAgent(
        service=service(llm),
        name="coordinator",
        instructions="COORDINATOR-ROLE: ask the researcher for figures.",
        plugins=[researcher],
    )


def ask(agent: ChatCompletionAgent) -> str:
    async def run() -> Any:
        return await agent.get_response(messages=TASK)

    return str(asyncio.run(run()))


CENSUS_TOOL = "Census-census_lookup"
"""Semantic Kernel names a plugin's function `Plugin-function`."""
RESEARCHER_TOOL = "researcher-researcher"
"""An agent used as a plugin: the plugin and its one function both take its name."""


def script() -> dict[str, list[Any]]:
    return {
        # The planted flaw: the researcher misstates the figure.
        "RESEARCHER-ROLE": [call(CENSUS_TOOL, city="Lyon"), say(WRONG)],
        "COORDINATOR-ROLE": [call(RESEARCHER_TOOL, messages="Population of Lyon?"), say(WRONG)],
    }


def test_a_wrong_claim_by_an_agent_used_as_a_plugin_graded_afterwards(
    pipeline: Pipeline,
) -> None:
    llm = ScriptedOpenAI(script())
    expected = harness.Expected(
        agents=["coordinator", "researcher"],
        task=TASK,
        tools={CENSUS_TOOL: "researcher", RESEARCHER_TOOL: "coordinator"},
        tool_results={CENSUS_TOOL: harness.CENSUS},
        final_answer="225,520",
    )
    graded = harness.graded_wrong_claim(pipeline, llm, lambda: ask(coordinator(llm)), expected)
    assert graded.answer == WRONG
    steps = graded.steps
    lookup = next(s for s in steps if s["tool_name"] == CENSUS_TOOL)
    culprit = steps[lookup["index"] + 1]
    assert (culprit["agent"], culprit["kind"], culprit["content"]) == ("researcher", "llm", WRONG)


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"COORDINATOR-ROLE": [fail(500)]})
    before, _, error = pipeline.serving(llm, lambda: ask(coordinator(llm)))
    assert error is not None
    run, _ = pipeline.the_failed_run(before, agents=["coordinator"])
    assert run["trajectory"]["task"] == TASK
    failed = harness.error_steps(run)
    assert failed and "500" in (failed[-1]["error"] or ""), failed
    assert not run["trajectory"]["final_answer"], run["trajectory"]["final_answer"]


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before, _, error = pipeline.serving(llm, lambda: ask(coordinator(llm, census_fails=True)))
    # Semantic Kernel hands the function's error to the model as its result.
    assert error is None, error
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    assert sorted(run["agents"]) == ["coordinator", "researcher"], run["agents"]
    failed = harness.failed_tool_step(run, "researcher", CENSUS_TOOL)
    assert TIMED_OUT in (failed["error"] or failed["content"]), failed
