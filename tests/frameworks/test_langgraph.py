"""LangGraph (a StateGraph of named nodes with a ToolNode; `create_react_agent` agents as
nodes of a parent graph; LangChain's `create_agent` agents called as a lead agent's
tools), with LangChain's ChatOpenAI, traced one of two ways: by OpenInference's
openinference-instrumentation-langchain (`langgraph`), or by Traceloop OpenLLMetry's
opentelemetry-instrumentation-langchain (`langgraph+openllmetry`), which speaks the GenAI
conventions and writes LangChain's run metadata as association properties.
`FAULTFINDER_CONFORMANCE_FRAMEWORK` (set by noxfile.py) says which one runs."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, create_react_agent

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, CensusDown, Pipeline
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say

FRAMEWORK, PROJECT = harness.framework_under_test("langgraph")

if FRAMEWORK == "langgraph+openllmetry":
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    pipeline = harness.pipeline_fixture(PROJECT, LangchainInstrumentor())
else:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    pipeline = harness.pipeline_fixture(PROJECT, LangChainInstrumentor())


def census_tool(*, fails: bool = False) -> Any:
    @tool
    def census_lookup(city: str) -> str:
        """The population of a city from the national census."""
        return harness.census_answer(city, fails=fails)

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


def agents_as_tools(llm: ScriptedOpenAI) -> Any:
    """LangChain's `create_agent`: a lead agent whose tools ask two named agents, the
    researcher (with the census tool) and the writer. Every span of an agent's graph runs
    in a node called `model` or `tools`; only LangChain's `lc_agent_name` says whose."""
    chat = model(llm)
    researcher = create_agent(
        chat,
        [census_tool()],
        system_prompt="RESEARCHER-ROLE: look figures up in the census.",
        name="researcher",
    )
    writer = create_agent(
        chat, [], system_prompt="WRITER-ROLE: write the answer for the reader.", name="writer"
    )

    @tool
    def ask_researcher(question: str) -> str:
        """Ask the researcher to look a figure up."""
        return str(researcher.invoke({"messages": [HumanMessage(question)]})["messages"][-1].text)

    @tool
    def ask_writer(notes: str) -> str:
        """Ask the writer to write the answer from the notes."""
        return str(writer.invoke({"messages": [HumanMessage(notes)]})["messages"][-1].text)

    return create_agent(
        chat,
        [ask_researcher, ask_writer],
        system_prompt="LEAD-ROLE: ask the researcher, then the writer, then answer.",
        name="lead",
    )


def ask(app: Any) -> str:
    state = app.invoke({"messages": [HumanMessage(TASK)]})
    return str(state["messages"][-1].content)


def script() -> dict[str, list[Any]]:
    return {
        "RESEARCHER-ROLE": [
            call("census_lookup", city="Lyon"),
            say("The census says Lyon has 522,250 inhabitants."),
        ],
        # The planted flaw: the writer misstates the figure.
        "WRITER-ROLE": [say(WRONG)],
    }


EXPECTED = harness.expected_census(
    agents=["researcher", "writer"], tools={"census_lookup": "researcher"}
)


def graded_wrong(pipeline: Pipeline, build: Any) -> None:
    llm = ScriptedOpenAI(script())
    graded = harness.graded_wrong_claim(pipeline, llm, lambda: ask(build(llm)), EXPECTED)
    assert graded.answer == WRONG
    writer = [s for s in graded.steps if s["agent"] == "writer"]
    assert [s["content"] for s in writer] == [WRONG], writer


def test_graph_nodes_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    graded_wrong(pipeline, node_graph)


def test_react_agents_as_nodes_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    graded_wrong(pipeline, react_agents_graph)


def test_agents_called_as_tools_are_the_names_they_were_given(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(
        {
            **script(),
            "LEAD-ROLE": [
                call("ask_researcher", question=TASK),
                call("ask_writer", notes="The census says Lyon has 522,250 inhabitants."),
                say(WRONG),
            ],
        }
    )
    # A tool that runs an agent is no step of its own: the agent's steps are its work.
    expected = harness.expected_census(
        agents=["lead", "researcher", "writer"], tools={"census_lookup": "researcher"}
    )
    graded = harness.graded_wrong_claim(pipeline, llm, lambda: ask(agents_as_tools(llm)), expected)
    by_agent = [(s["agent"], s["content"]) for s in graded.steps if s["kind"] != "tool"]
    assert [agent for agent, _ in by_agent] == [
        *("lead", "researcher", "researcher"),
        *("lead", "writer", "lead"),
    ], by_agent
    assert by_agent[4] == ("writer", WRONG), by_agent


def test_an_unnamed_create_agent_is_the_agent_not_its_model_node(pipeline: Pipeline) -> None:
    """LangChain's `create_agent` given no name, run on its own: its graph's nodes are
    `model` and `tools`, and neither is the agent; the census tool is the agent's own."""
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": script()["RESEARCHER-ROLE"]})

    def unnamed() -> Any:
        return create_agent(
            model(llm), [census_tool()], system_prompt="RESEARCHER-ROLE: look figures up."
        )

    before, answer, error = pipeline.serving(llm, lambda: ask(unnamed()))
    assert error is None and "522,250" in str(answer)
    run = pipeline.the_run(before, statuses=("complete",))
    assert run["agents"] == ["agent"], run["agents"]
    steps = run["trajectory"]["steps"]
    assert [(s["kind"], s["agent"]) for s in steps if s["kind"] in ("llm", "tool")] == [
        ("llm", "agent"),
        ("tool", "agent"),
        ("llm", "agent"),
    ], steps


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": [fail(500)]})
    before, _, error = pipeline.serving(llm, lambda: ask(node_graph(llm)))
    assert error is not None
    pipeline.the_failed_run(before, agents=["researcher"])


def test_a_raising_tool_that_escapes_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": [call("census_lookup", city="Lyon")]})
    before, _, error = pipeline.serving(
        llm, lambda: ask(node_graph(llm, census_fails=True, tool_errors_fed_back=False))
    )
    assert isinstance(error, CensusDown)
    run, _ = pipeline.the_failed_run(before, agents=["researcher"])
    harness.failed_tool_step(run, "researcher")


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before, answer, error = pipeline.serving(llm, lambda: ask(node_graph(llm, census_fails=True)))
    assert error is None and answer == WRONG  # the ToolNode fed the error back to the model
    run = pipeline.the_run(before, statuses=("complete",))
    assert sorted(run["agents"]) == ["researcher", "writer"], run["agents"]
    failed = harness.failed_tool_step(run, "researcher")
    assert TIMED_OUT in (failed["error"] or "")


def test_a_recorded_conversation_replays_as_the_live_run_its_labels_move_to(
    pipeline: Pipeline,
) -> None:
    """data/corpus/programs/langgraph_chat_replay.py replays a labelled τ-bench
    conversation through a `create_react_agent` (`FRAMEWORK=langgraph
    data/conversations/replay_live.sh`): one invocation per customer turn, given the
    messages so far, under one span of the service's own. The conversation chosen ends in
    `transfer_to_human_agents`, which openinference-instrumentation-langchain marks as an
    AGENT span (a handoff tool): it must still be the agent's tool call, not a turn of an
    agent named after LangGraph's `tools` node. And the customer's later turns, read from
    LangChain's messages in the model calls' inputs, are user steps."""
    run = harness.replay_recorded_conversation(
        pipeline, "langgraph_chat_replay", "tau-airline-1-t2"
    )
    steps = run["trajectory"]["steps"]
    assert any(step.get("tool_name") == "transfer_to_human_agents" for step in steps)
    # The agent is the name create_react_agent was given, not its inner node's (`agent`).
    assert {step["agent"] for step in steps} == {"assistant", "user"}, harness.show_trajectory(
        run["trajectory"]
    )
