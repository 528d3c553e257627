"""Google ADK (a coordinator LlmAgent transferring to a sub-agent that calls a function
tool; LiteLLM as the model client), traced by openinference-instrumentation-google-adk."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

# LiteLLM fetches its model price list from the internet unless told to use its own copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest
from google.adk.agents import LlmAgent
from google.adk.models.lite_llm import LiteLlm
from google.adk.runners import InMemoryRunner
from google.adk.tools import BaseTool, ToolContext
from google.genai import types
from openinference.instrumentation.google_adk import GoogleADKInstrumentor
from opentelemetry import trace

from tests.frameworks.harness import Expected, Pipeline, check_attributions, check_understood
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say
from tests.integration.sidecar import Sidecar

FRAMEWORK = "google-adk"
PROJECT = "conformance-google-adk"
TASK = "What is the population of Lyon?"
CENSUS = "Lyon: 522,250 inhabitants (census 2021)"
APP = "census_app"


@pytest.fixture(scope="module")
def pipeline(sidecar: Sidecar) -> Iterator[Pipeline]:
    pipeline = Pipeline(sidecar, PROJECT)
    # ADK traces to the global provider by itself; set as its users do, its own spans
    # reach the sidecar beside the instrumentation's (in the same trace: one run).
    trace.set_tracer_provider(pipeline.provider)
    # The instrumentation's model-call spans need ADK's `call_llm` span, which ADK's
    # default telemetry schema (2) no longer opens: without it no model call is traced.
    schema = os.environ.get("ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN")
    os.environ["ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN"] = "1"
    GoogleADKInstrumentor().instrument(tracer_provider=pipeline.provider)
    try:
        yield pipeline
    finally:
        GoogleADKInstrumentor().uninstrument()
        if schema is None:
            os.environ.pop("ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN", None)
        else:
            os.environ["ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN"] = schema
        pipeline.shutdown()


class CensusDown(RuntimeError):
    """The census service did not answer."""


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
        if census_fails:
            raise CensusDown(f"census service timed out for {city}")
        return CENSUS

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


def census_script() -> dict[str, list]:
    # The census agent's instruction is checked first: ADK lists the other agents (the
    # coordinator among them) in every agent's system text.
    return {
        "CENSUS-ROLE": [
            call("census_lookup", city="Lyon"),
            # The planted flaw: the digits of the census figure, transposed.
            say("Lyon has 225,520 inhabitants."),
        ],
        "COORDINATOR-ROLE": [call("transfer_to_agent", agent_name="census_agent")],
    }


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(census_script())
    before = pipeline.run_ids()
    with llm.running():
        answer, error = pipeline.invoke(lambda: ask(coordinator(llm), TASK))
    assert error is None, error
    assert "225,520" in str(answer)
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    expected = Expected(
        agents=["coordinator", "census_agent"],
        task=TASK,
        tools={"census_lookup": "census_agent", "transfer_to_agent": "coordinator"},
        tool_results={"census_lookup": CENSUS},
        final_answer="225,520",
    )
    check_understood(run, expected, project=PROJECT)
    steps = run["trajectory"]["steps"]
    assert steps[-1]["agent"] == "census_agent" and "225,520" in steps[-1]["content"]
    pipeline.post_outcome(run["id"], outcome="failure", ground_truth="522,250")
    attributed = pipeline.the_run(before, statuses=("attributed",))
    check_attributions(attributed, ground_truth="522,250")


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"COORDINATOR-ROLE": [fail(500)]})
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: ask(coordinator(llm), TASK))
    assert error is not None
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert run["agents"] == ["coordinator"], run["agents"]
    check_attributions(pipeline.the_run(before, statuses=("attributed",)), ground_truth=None)


def test_a_raising_tool_that_ends_the_run_fails_it(pipeline: Pipeline) -> None:
    script = census_script()
    script["CENSUS-ROLE"] = script["CENSUS-ROLE"][:1]
    llm = ScriptedOpenAI(script)
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: ask(coordinator(llm, census_fails=True), TASK))
    assert isinstance(error, CensusDown), error
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert sorted(run["agents"]) == ["census_agent", "coordinator"], run["agents"]
    failed = [
        s for s in run["trajectory"]["steps"] if s["kind"] == "tool" and s["status"] == "error"
    ]
    assert [(s["agent"], s["tool_name"]) for s in failed] == [("census_agent", "census_lookup")]
    attributed = check_attributions(
        pipeline.the_run(before, statuses=("attributed",)), ground_truth=None
    )
    assert attributed["first_error"]["agent"] == "census_agent"


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(census_script())
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(
            lambda: ask(coordinator(llm, census_fails=True, feed_back=True), TASK)
        )
    assert error is None, error
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    steps = run["trajectory"]["steps"]
    # The error the callback handed back is the tool's result, and the step stays failed.
    failed = [s for s in steps if s["status"] == "error"]
    assert [(s["agent"], s["tool_name"]) for s in failed] == [("census_agent", "census_lookup")]
    assert "census service timed out" in failed[0]["content"]
    assert run["trajectory"]["final_answer"] and "225,520" in run["trajectory"]["final_answer"]
