"""Strands Agents (a Swarm whose researcher calls a function tool and hands off to a
writer; agents called as another agent's tools), with Strands' OpenAI model provider,
traced by Strands' own telemetry: no instrumentation package, the spans the framework
opens itself on the global tracer provider (what `StrandsTelemetry` sets up). Strands
records what the model was sent and said as span events (`strands`: one per message,
`gen_ai.user.message`, `gen_ai.choice`, …; `strands+genai-latest`: today's GenAI
messages in one `gen_ai.client.inference.operation.details` event), not as attributes.
`FAULTFINDER_CONFORMANCE_FRAMEWORK` (set by noxfile.py) says which."""

from __future__ import annotations

from typing import Any

from strands import Agent, tool
from strands.models.openai import OpenAIModel
from strands.multiagent import Swarm
from strands.multiagent.base import Status

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, Pipeline
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say

FRAMEWORK, PROJECT = harness.framework_under_test("strands")

# Strands traces to the global provider by itself. `strands+genai-latest`: with its opt-in
# to today's GenAI conventions (read when the first agent is made, in the fixture's scope).
pipeline = harness.pipeline_fixture(
    PROJECT,
    global_provider=True,
    env={"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}
    if FRAMEWORK == "strands+genai-latest"
    else None,
)


def model(llm: ScriptedOpenAI) -> OpenAIModel:
    # No retries: a scripted 500 is the endpoint's one answer.
    return OpenAIModel(
        client_args={"base_url": llm.base_url, "api_key": "x", "max_retries": 0},
        model_id="scripted",
    )


def census_tool(*, fails: bool = False) -> Any:
    @tool
    def census_lookup(city: str) -> str:
        """The population of a city from the national census.

        Args:
            city: the city's name
        """
        return harness.census_answer(city, fails=fails)

    return census_lookup


def swarm(llm: ScriptedOpenAI, *, census_fails: bool = False) -> Swarm:
    researcher = Agent(
        name="researcher",
        model=model(llm),
        system_prompt="RESEARCHER-ROLE: look figures up in the census, then hand off.",
        tools=[census_tool(fails=census_fails)],
        callback_handler=None,
    )
    writer = Agent(
        name="writer",
        model=model(llm),
        system_prompt="WRITER-ROLE: write the answer for the reader.",
        callback_handler=None,
    )
    return Swarm([researcher, writer], entry_point=researcher)


def swarm_script() -> dict[str, list[Any]]:
    return {
        "RESEARCHER-ROLE": [
            call("census_lookup", city="Lyon"),
            call(
                "handoff_to_agent",
                agent_name="writer",
                message="The census figure is in; write the answer.",
            ),
            say("Handed off to the writer."),
        ],
        # The planted flaw: the writer misstates the figure.
        "WRITER-ROLE": [say(WRONG)],
    }


def coordinator(llm: ScriptedOpenAI) -> Agent:
    """A coordinator that calls the researcher as one of its tools (Strands' "agents as
    tools")."""
    researcher = Agent(
        name="researcher",
        model=model(llm),
        system_prompt="RESEARCHER-ROLE: look figures up in the census.",
        tools=[census_tool()],
        callback_handler=None,
    )

    @tool
    def ask_researcher(question: str) -> str:
        """Ask the researcher, who looks figures up in the census.

        Args:
            question: what to find out
        """
        return str(researcher(question)).strip()

    return Agent(
        name="coordinator",
        model=model(llm),
        system_prompt="COORDINATOR-ROLE: ask the researcher for figures.",
        tools=[ask_researcher],
        callback_handler=None,
    )


def test_a_wrong_claim_after_a_handoff_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(swarm_script())
    expected = harness.expected_census(
        agents=["researcher", "writer"],
        tools={"census_lookup": "researcher", "handoff_to_agent": "researcher"},
    )
    graded = harness.graded_wrong_claim(pipeline, llm, lambda: swarm(llm)(TASK), expected)
    assert getattr(graded.answer, "status", None) == Status.COMPLETED, graded.answer
    steps = graded.steps
    claim = next(s for s in steps if s["content"] == WRONG and s["kind"] != "tool")
    assert claim["agent"] == "writer", claim


def test_an_agent_called_as_a_tool_is_an_agent_of_its_own(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(
        {
            "RESEARCHER-ROLE": [call("census_lookup", city="Lyon"), say(WRONG)],
            "COORDINATOR-ROLE": [
                call("ask_researcher", question="Population of Lyon?"),
                say(WRONG),
            ],
        }
    )
    expected = harness.expected_census(
        agents=["coordinator", "researcher"],
        tools={"census_lookup": "researcher", "ask_researcher": "coordinator"},
    )
    graded = harness.graded_wrong_claim(pipeline, llm, lambda: coordinator(llm)(TASK), expected)
    steps = graded.steps
    lookup = next(s for s in steps if s["tool_name"] == "census_lookup")
    culprit = steps[lookup["index"] + 1]
    assert (culprit["agent"], culprit["content"]) == ("researcher", WRONG), culprit


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": [fail(500)]})
    before, output, error = pipeline.serving(llm, lambda: swarm(llm)(TASK))
    run, _ = pipeline.the_failed_run(before, agents=["researcher"])
    assert run["trajectory"]["task"] == TASK
    failed = harness.error_steps(run)
    assert failed, run["trajectory"]["steps"]
    assert not run["trajectory"]["final_answer"], (output, error, run["trajectory"])


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(swarm_script())
    before, _, error = pipeline.serving(llm, lambda: swarm(llm, census_fails=True)(TASK))
    # Strands hands the tool's error to the model as the tool's result.
    assert error is None, error
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    assert sorted(run["agents"]) == ["researcher", "writer"], run["agents"]
    failed = harness.failed_tool_step(run, "researcher")
    assert TIMED_OUT in (failed["error"] or failed["content"]), failed
