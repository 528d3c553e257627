"""AutoGen AgentChat (a round-robin team of two assistant agents, one calling a tool),
traced by openinference-instrumentation-autogen-agentchat, with autogen-core's own GenAI
and runtime spans going to the same (global) tracer provider, as Phoenix's `register()`
sets it up."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import TaskResult
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_ext.models.openai import OpenAIChatCompletionClient
from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor
from opentelemetry import trace

from tests.frameworks.harness import Expected, Pipeline, check_attributions, check_understood
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say
from tests.integration.sidecar import Sidecar

FRAMEWORK = "autogen-agentchat"
PROJECT = "conformance-autogen-agentchat"
TASK = "What is the population of Lyon?"
CENSUS = "Lyon: 522,250 inhabitants (census 2021)"
WRONG = "Lyon has 225,520 inhabitants. TERMINATE"


@pytest.fixture(scope="module")
def pipeline(sidecar: Sidecar) -> Iterator[Pipeline]:
    pipeline = Pipeline(sidecar, PROJECT)
    # autogen-core traces to the global provider (agent creation and invocation, tool
    # execution, its runtime's messaging): a Phoenix user's `register()` sets it.
    trace.set_tracer_provider(pipeline.provider)
    AutogenAgentChatInstrumentor().instrument(tracer_provider=pipeline.provider)
    try:
        yield pipeline
    finally:
        AutogenAgentChatInstrumentor().uninstrument()
        pipeline.shutdown()


class CensusDown(RuntimeError):
    """The census service did not answer."""


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
        if census_fails:
            raise CensusDown(f"census service timed out for {city}")
        return CENSUS

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


def researcher_looks_up() -> list:
    return [
        call("census_lookup", city="Lyon"),
        say("The census gives Lyon 522,250 inhabitants."),
    ]


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(
        {
            "RESEARCHER-ROLE": researcher_looks_up(),
            # The planted flaw: the digits of the census figure, transposed.
            "WRITER-ROLE": [say(WRONG)],
        }
    )
    with llm.running():
        agents = built(pipeline, llm)
        before = pipeline.run_ids()
        result, error = pipeline.invoke(lambda: invoke(agents))
    assert error is None, error
    assert isinstance(result, TaskResult) and "225,520" in str(result.messages[-1].content)
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    expected = Expected(
        agents=["researcher", "writer"],
        task=TASK,
        tools={"census_lookup": "researcher"},
        tool_results={"census_lookup": CENSUS},
        final_answer="225,520",
    )
    check_understood(run, expected, project=PROJECT)
    trajectory = run["trajectory"]
    # The answer is the writer's last message, not the team's whole transcript.
    assert trajectory["final_answer"].strip() == WRONG, trajectory["final_answer"]
    # One step per tool call, though autogen-core records the call beneath the
    # instrumentation's own tool span.
    calls = [s for s in trajectory["steps"] if s["tool_name"] == "census_lookup"]
    assert len(calls) == 1, calls
    # The culprit step reads as the writer's claim, after the researcher's tool result.
    claims = [s for s in trajectory["steps"] if "225,520" in s["content"]]
    assert claims and claims[0]["agent"] == "writer", claims
    assert claims[0]["index"] > calls[0]["index"]
    pipeline.post_outcome(run["id"], outcome="failure", ground_truth="522,250")
    attributed = pipeline.the_run(before, statuses=("attributed",))
    check_attributions(attributed, ground_truth="522,250")


def test_building_the_team_makes_no_run(pipeline: Pipeline) -> None:
    """autogen-core records each agent's construction as a root span of its own
    (`create_agent`): configuration, not an invocation of the agents."""
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": researcher_looks_up(), "WRITER-ROLE": [say(WRONG)]})
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: invoke(team(llm)))
    assert error is None, error
    run = pipeline.the_run(before, statuses=("complete",))
    assert sorted(run["agents"]) == ["researcher", "writer"], run["agents"]


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": [fail(500)]})
    with llm.running():
        agents = built(pipeline, llm)
        before = pipeline.run_ids()
        _, error = pipeline.invoke(lambda: invoke(agents))
    assert error is not None
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert run["agents"] == ["researcher"], run["agents"]
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert failed and failed[-1]["agent"] == "researcher", failed
    check_attributions(pipeline.the_run(before, statuses=("attributed",)), ground_truth=None)


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(
        {
            "RESEARCHER-ROLE": [
                call("census_lookup", city="Lyon"),
                say("The census did not answer; Lyon has about 225,520 inhabitants."),
            ],
            "WRITER-ROLE": [say(WRONG)],
        }
    )
    with llm.running():
        agents = built(pipeline, llm, census_fails=True)
        before = pipeline.run_ids()
        _, error = pipeline.invoke(lambda: invoke(agents))
    assert error is None  # AutoGen feeds the tool's error back to the model
    run = pipeline.the_run(before, statuses=("complete",))
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert [(s["agent"], s["tool_name"]) for s in failed] == [("researcher", "census_lookup")]
    assert "census service timed out" in (failed[0]["error"] or "")
