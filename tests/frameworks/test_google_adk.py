"""Google ADK (a coordinator LlmAgent transferring to a sub-agent that calls a function
tool; LiteLLM as the model client), traced by openinference-instrumentation-google-adk."""

from __future__ import annotations

import asyncio
import os
from typing import Any

# LiteLLM fetches its model price list from the internet unless told to use its own copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from google.adk.agents import LlmAgent
from google.adk.models.lite_llm import LiteLlm
from google.adk.runners import InMemoryRunner
from google.adk.tools import BaseTool, ToolContext
from google.genai import types
from openinference.instrumentation.google_adk import GoogleADKInstrumentor

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, CensusDown, Pipeline
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say

PROJECT = "conformance-google-adk"
APP = "census_app"

# ADK traces to the global provider by itself; set as its users do, its own spans reach
# the sidecar beside the instrumentation's (in the same trace: one run). The
# instrumentation's model-call spans need ADK's `call_llm` span, which ADK's default
# telemetry schema (2) no longer opens: without schema 1 no model call is traced.
pipeline = harness.pipeline_fixture(
    PROJECT,
    GoogleADKInstrumentor(),
    global_provider=True,
    env={"ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN": "1"},
)


def coordinator(
    llm: ScriptedOpenAI, *, census_fails: bool = False, feed_back: bool = False
) -> LlmAgent:
    """The coordinator; `census_fails`: the census tool raises; `feed_back`: the census
    agent's tool-error callback hands the error to the model instead of ending the run."""
    model = LiteLlm(model="openai/scripted", api_base=llm.base_url, api_key="scripted")

    def census_lookup(city: str) -> str:
        """The population of a city from the national census.

        Args:
            city: the city's name
        """
        return harness.census_answer(city, fails=census_fails)

    def tell_the_model(
        tool: BaseTool, args: dict[str, Any], context: ToolContext, error: Exception
    ) -> dict[str, Any]:
        return {"error": f"{tool.name} failed: {error}"}

    census = LlmAgent(
        name="census_agent",
        model=model,
        description="Looks up populations in the census.",
        instruction="CENSUS-ROLE: answer from the census only.",
        tools=[census_lookup],
        on_tool_error_callback=tell_the_model if feed_back else None,
    )
    return LlmAgent(
        name="coordinator",
        model=model,
        instruction="COORDINATOR-ROLE: transfer population questions.",
        sub_agents=[census],
    )


def ask(agent: LlmAgent, text: str) -> str | None:
    """One invocation through ADK's runner; the text of its final response."""

    async def run() -> str | None:
        runner = InMemoryRunner(agent=agent, app_name=APP)
        session = await runner.session_service.create_session(app_name=APP, user_id="user")
        message = types.Content(role="user", parts=[types.Part(text=text)])
        final = None
        async for event in runner.run_async(
            user_id="user", session_id=session.id, new_message=message
        ):
            if event.is_final_response() and event.content and event.content.parts:
                final = "".join(part.text or "" for part in event.content.parts)
        return final

    return asyncio.run(run())


def census_script() -> dict[str, list[Any]]:
    # The census agent's instruction is checked first: ADK lists the other agents (the
    # coordinator among them) in every agent's system text.
    return {
        "CENSUS-ROLE": [
            call("census_lookup", city="Lyon"),
            # The planted flaw: the census agent misstates the figure.
            say(WRONG),
        ],
        "COORDINATOR-ROLE": [call("transfer_to_agent", agent_name="census_agent")],
    }


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(census_script())
    expected = harness.expected_census(
        agents=["coordinator", "census_agent"],
        tools={"census_lookup": "census_agent", "transfer_to_agent": "coordinator"},
    )
    graded = harness.graded_wrong_claim(
        pipeline, llm, lambda: ask(coordinator(llm), TASK), expected
    )
    assert "225,520" in str(graded.answer)
    steps = graded.steps
    assert steps[-1]["agent"] == "census_agent" and "225,520" in steps[-1]["content"]


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"COORDINATOR-ROLE": [fail(500)]})
    before, _, error = pipeline.serving(llm, lambda: ask(coordinator(llm), TASK))
    assert error is not None
    pipeline.the_failed_run(before, agents=["coordinator"])


def test_a_raising_tool_that_ends_the_run_fails_it(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(harness.first_reply_only(census_script(), "CENSUS-ROLE"))
    before, _, error = pipeline.serving(llm, lambda: ask(coordinator(llm, census_fails=True), TASK))
    assert isinstance(error, CensusDown), error
    run, attributed = pipeline.the_failed_run(before, agents=["census_agent", "coordinator"])
    failed = [
        s for s in run["trajectory"]["steps"] if s["kind"] == "tool" and s["status"] == "error"
    ]
    assert [(s["agent"], s["tool_name"]) for s in failed] == [("census_agent", "census_lookup")]
    assert attributed["first_error"]["agent"] == "census_agent"


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(census_script())
    before, _, error = pipeline.serving(
        llm, lambda: ask(coordinator(llm, census_fails=True, feed_back=True), TASK)
    )
    assert error is None, error
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    # The error the callback handed back is the tool's result, and the step stays failed.
    failed = harness.failed_tool_step(run, "census_agent")
    assert TIMED_OUT in failed["content"]
    assert run["trajectory"]["final_answer"] and "225,520" in run["trajectory"]["final_answer"]
