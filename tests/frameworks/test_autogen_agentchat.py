"""AutoGen AgentChat (a round-robin team of two assistant agents, one calling a tool),
traced by openinference-instrumentation-autogen-agentchat, with autogen-core's own GenAI
and runtime spans going to the same (global) tracer provider, as Phoenix's `register()`
sets it up."""

from __future__ import annotations

import asyncio
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import TaskResult
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_ext.models.openai import OpenAIChatCompletionClient
from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, Pipeline
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say

PROJECT = "conformance-autogen-agentchat"
WRITTEN = f"{WRONG} TERMINATE"
"""The writer's answer: the planted flaw, and the word that ends the team's chat."""

# autogen-core traces to the global provider (agent creation and invocation, tool
# execution, its runtime's messaging): a Phoenix user's `register()` sets it.
pipeline = harness.pipeline_fixture(PROJECT, AutogenAgentChatInstrumentor(), global_provider=True)


def team(llm: ScriptedOpenAI, *, census_fails: bool = False) -> RoundRobinGroupChat:
    client = OpenAIChatCompletionClient(
        model="scripted",
        base_url=llm.base_url,
        api_key="x",
        max_retries=0,
        model_info={
            "vision": False,
            "function_calling": True,
            "json_output": False,
            "family": "unknown",
            "structured_output": False,
        },
    )

    def census_lookup(city: str) -> str:
        """The population of a city from the national census."""
        return harness.census_answer(city, fails=census_fails)

    researcher = AssistantAgent(
        "researcher",
        model_client=client,
        tools=[census_lookup],
        system_message="RESEARCHER-ROLE: look populations up in the census.",
        reflect_on_tool_use=True,
    )
    writer = AssistantAgent(
        "writer",
        model_client=client,
        system_message="WRITER-ROLE: write the answer, then say TERMINATE.",
    )
    done = TextMentionTermination("TERMINATE") | MaxMessageTermination(8)
    return RoundRobinGroupChat([researcher, writer], termination_condition=done)


def built(pipeline: Pipeline, llm: ScriptedOpenAI, **options: bool) -> RoundRobinGroupChat:
    """The team, its construction's spans delivered: building the agents is not the
    invocation under test (`test_building_the_team_makes_no_run` is about it)."""
    agents = team(llm, **options)
    pipeline.provider.force_flush()
    return agents


def invoke(agents: RoundRobinGroupChat) -> TaskResult:
    return asyncio.run(agents.run(task=TASK))


def built_and_invoked(
    pipeline: Pipeline, llm: ScriptedOpenAI, **options: bool
) -> tuple[set[str], object, BaseException | None]:
    """As `Pipeline.serving`, the team `built` before the runs are counted."""
    with llm.running():
        agents = built(pipeline, llm, **options)
        before = pipeline.run_ids()
        result, error = pipeline.invoke(lambda: invoke(agents))
    return before, result, error


def researcher_looks_up() -> list[Any]:
    return [
        call("census_lookup", city="Lyon"),
        say("The census gives Lyon 522,250 inhabitants."),
    ]


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(
        {
            "RESEARCHER-ROLE": researcher_looks_up(),
            # The planted flaw: the writer misstates the figure.
            "WRITER-ROLE": [say(WRITTEN)],
        }
    )
    # The team is built before the runs are counted: `graded_wrong_claim`'s steps, one by
    # one, with `built_and_invoked` for `Pipeline.serving`.
    before, result, error = built_and_invoked(pipeline, llm)
    assert error is None, error
    assert isinstance(result, TaskResult) and "225,520" in str(result.messages[-1].content)
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    expected = harness.expected_census(
        agents=["researcher", "writer"], tools={"census_lookup": "researcher"}
    )
    harness.check_understood(run, expected, project=PROJECT)
    trajectory = run["trajectory"]
    # The answer is the writer's last message, not the team's whole transcript.
    assert trajectory["final_answer"].strip() == WRITTEN, trajectory["final_answer"]
    # One step per tool call, though autogen-core records the call beneath the
    # instrumentation's own tool span.
    calls = [s for s in trajectory["steps"] if s["tool_name"] == "census_lookup"]
    assert len(calls) == 1, calls
    # The culprit step reads as the writer's claim, after the researcher's tool result.
    claims = [s for s in trajectory["steps"] if "225,520" in s["content"]]
    assert claims and claims[0]["agent"] == "writer", claims
    assert claims[0]["index"] > calls[0]["index"]
    harness.graded(pipeline, before, run)


def test_building_the_team_makes_no_run(pipeline: Pipeline) -> None:
    """autogen-core records each agent's construction as a root span of its own
    (`create_agent`): configuration, not an invocation of the agents."""
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": researcher_looks_up(), "WRITER-ROLE": [say(WRITTEN)]})
    before, _, error = pipeline.serving(llm, lambda: invoke(team(llm)))
    assert error is None, error
    run = pipeline.the_run(before, statuses=("complete",))
    assert sorted(run["agents"]) == ["researcher", "writer"], run["agents"]


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": [fail(500)]})
    before, _, error = built_and_invoked(pipeline, llm)
    assert error is not None
    run, _ = pipeline.the_failed_run(before, agents=["researcher"])
    failed = harness.error_steps(run)
    assert failed and failed[-1]["agent"] == "researcher", failed


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(
        {
            "RESEARCHER-ROLE": [
                call("census_lookup", city="Lyon"),
                say("The census did not answer; Lyon has about 225,520 inhabitants."),
            ],
            "WRITER-ROLE": [say(WRITTEN)],
        }
    )
    before, _, error = built_and_invoked(pipeline, llm, census_fails=True)
    assert error is None  # AutoGen feeds the tool's error back to the model
    run = pipeline.the_run(before, statuses=("complete",))
    failed = harness.failed_tool_step(run, "researcher")
    assert TIMED_OUT in (failed["error"] or "")
