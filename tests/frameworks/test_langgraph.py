"""LangGraph (a StateGraph of named nodes with a ToolNode; `create_react_agent` agents as
nodes of a parent graph), with LangChain's ChatOpenAI, traced by
openinference-instrumentation-langchain."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, create_react_agent
from openinference.instrumentation.langchain import LangChainInstrumentor

from tests.frameworks.harness import Expected, Pipeline, check_attributions, check_understood
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say
from tests.integration.sidecar import Sidecar

PROJECT = "conformance-langgraph"
TASK = "What is the population of Lyon?"
CENSUS = "Lyon: 522,250 inhabitants (census 2021)"
WRONG = "Lyon has 225,520 inhabitants."
"""The planted flaw: the writer transposes the census figure's digits."""


@pytest.fixture(scope="module")
def pipeline(sidecar: Sidecar) -> Iterator[Pipeline]:
    pipeline = Pipeline(sidecar, PROJECT)
    LangChainInstrumentor().instrument(tracer_provider=pipeline.provider)
    try:
        yield pipeline
    finally:
        LangChainInstrumentor().uninstrument()
        pipeline.shutdown()


class CensusDown(RuntimeError):
    """The census service did not answer."""


def census_tool(*, fails: bool = False) -> Any:
    @tool
    def census_lookup(city: str) -> str:
        """The population of a city from the national census."""
        if fails:
            raise CensusDown(f"census service timed out for {city}")
        return CENSUS

    return census_lookup


def model(llm: ScriptedOpenAI) -> ChatOpenAI:
    return ChatOpenAI(base_url=llm.base_url, api_key="x", model="scripted", max_retries=0)


def node_graph(
    llm: ScriptedOpenAI, *, census_fails: bool = False, tool_errors_fed_back: bool = True
) -> Any:
    """researcher (model with the census tool) ⇄ tools (a ToolNode) → writer."""
    census = census_tool(fails=census_fails)
    chat = model(llm)
    with_tools = chat.bind_tools([census])

    def researcher(state: MessagesState) -> dict[str, list[Any]]:
        prompt = SystemMessage("RESEARCHER-ROLE: look figures up in the census.")
        return {"messages": [with_tools.invoke([prompt, *state["messages"]])]}

    def writer(state: MessagesState) -> dict[str, list[Any]]:
        prompt = SystemMessage("WRITER-ROLE: write the answer for the reader.")
        return {"messages": [chat.invoke([prompt, *state["messages"]])]}

    def route(state: MessagesState) -> str:
        return "tools" if state["messages"][-1].tool_calls else "writer"

    graph = StateGraph(MessagesState)
    graph.add_node("researcher", researcher)
    graph.add_node("tools", ToolNode([census], handle_tool_errors=tool_errors_fed_back))
    graph.add_node("writer", writer)
    graph.add_edge(START, "researcher")
    graph.add_conditional_edges("researcher", route, ["tools", "writer"])
    graph.add_edge("tools", "researcher")
    graph.add_edge("writer", END)
    return graph.compile()


def react_agents_graph(llm: ScriptedOpenAI) -> Any:
    """Two `create_react_agent` agents, researcher then writer, as a parent graph's nodes."""
    chat = model(llm)
    researcher = create_react_agent(
        chat,
        [census_tool()],
        prompt="RESEARCHER-ROLE: look figures up in the census.",
        name="researcher",
    )
    writer = create_react_agent(
        chat, [], prompt="WRITER-ROLE: write the answer for the reader.", name="writer"
    )
    graph = StateGraph(MessagesState)
    graph.add_node(researcher)
    graph.add_node(writer)
    graph.add_edge(START, "researcher")
    graph.add_edge("researcher", "writer")
    graph.add_edge("writer", END)
    return graph.compile()


def ask(app: Any) -> str:
    state = app.invoke({"messages": [HumanMessage(TASK)]})
    return str(state["messages"][-1].content)


def script() -> dict[str, list[Any]]:
    return {
        "RESEARCHER-ROLE": [
            call("census_lookup", city="Lyon"),
            say("The census says Lyon has 522,250 inhabitants."),
        ],
        "WRITER-ROLE": [say(WRONG)],
    }


EXPECTED = Expected(
    agents=["researcher", "writer"],
    task=TASK,
    tools={"census_lookup": "researcher"},
    tool_results={"census_lookup": CENSUS},
    final_answer="225,520",
)


def graded_wrong(pipeline: Pipeline, build: Any) -> None:
    llm = ScriptedOpenAI(script())
    before = pipeline.run_ids()
    with llm.running():
        answer, error = pipeline.invoke(lambda: ask(build(llm)))
    assert error is None and answer == WRONG
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    check_understood(run, EXPECTED, project=PROJECT)
    writer = [s for s in run["trajectory"]["steps"] if s["agent"] == "writer"]
    assert [s["content"] for s in writer] == [WRONG], writer
    pipeline.post_outcome(run["id"], outcome="failure", ground_truth="522,250")
    attributed = pipeline.the_run(before, statuses=("attributed",))
    check_attributions(attributed, ground_truth="522,250")


def test_graph_nodes_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    graded_wrong(pipeline, node_graph)


def test_react_agents_as_nodes_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    graded_wrong(pipeline, react_agents_graph)


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": [fail(500)]})
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: ask(node_graph(llm)))
    assert error is not None
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert run["agents"] == ["researcher"], run["agents"]
    check_attributions(pipeline.the_run(before, statuses=("attributed",)), ground_truth=None)


def test_a_raising_tool_that_escapes_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": [call("census_lookup", city="Lyon")]})
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(
            lambda: ask(node_graph(llm, census_fails=True, tool_errors_fed_back=False))
        )
    assert isinstance(error, CensusDown)
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert run["agents"] == ["researcher"], run["agents"]
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert [(s["agent"], s["tool_name"]) for s in failed] == [("researcher", "census_lookup")]
    check_attributions(pipeline.the_run(before, statuses=("attributed",)), ground_truth=None)


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before = pipeline.run_ids()
    with llm.running():
        answer, error = pipeline.invoke(lambda: ask(node_graph(llm, census_fails=True)))
    assert error is None and answer == WRONG  # the ToolNode fed the error back to the model
    run = pipeline.the_run(before, statuses=("complete",))
    assert sorted(run["agents"]) == ["researcher", "writer"], run["agents"]
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert [(s["agent"], s["tool_name"]) for s in failed] == [("researcher", "census_lookup")]
    assert "census service timed out" in (failed[0]["error"] or "")
