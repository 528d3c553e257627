"""A LangGraph team: a Researcher node looks the facts up, an Analyst node computes the
answer, each with its own tools (ToolNode), traced by openinference-instrumentation-langchain.

    echo "What is the population of Varnholm?" | python langgraph_team.py
"""

from __future__ import annotations

import os
import sys
from typing import Any

from corpus_tools import (
    MAX_TOKENS,
    answer_line,
    calculate,
    city_facts,
    convert_units,
    country_facts,
    read_task,
    sales_total,
)
from corpus_tracing import tracer_provider
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from openinference.instrumentation.langchain import LangChainInstrumentor

RESEARCHER = (
    "You are the Researcher. Look up the cities, countries or sales the question names "
    'with the tools, for example {"name": "city_facts", "arguments": {"city": '
    '"Varnholm, Kestrel Bay"}}. Then state the facts you found in one sentence.'
)
ANALYST = (
    "You are the Analyst. Answer the question from the Researcher's facts. "
    "Use a tool for any arithmetic or unit conversion. "
    "End with one line that holds only the answer."
)


def researcher_turns(messages: list[Any]) -> list[Any]:
    """The question and the Researcher's own calls and results, up to its hand-over."""
    turns = []
    for message in messages:
        turns.append(message)
        if isinstance(message, AIMessage) and not message.tool_calls and len(turns) > 1:
            break
    return turns


def analyst_view(messages: list[Any]) -> list[Any]:
    """The Analyst's prompt: the question with the Researcher's hand-over note as one
    user turn (the model continues a conversation that ends with another assistant's
    turn instead of answering it), then the Analyst's own calls and results."""
    seen = researcher_turns(messages)
    question, note = seen[0].content, seen[-1].content
    brief = HumanMessage(f"Question: {question}\nThe Researcher found: {note}")
    return [brief, *messages[len(seen) :]]


def build_graph() -> Any:
    model = ChatOpenAI(
        model=os.environ.get("FAULTFINDER_AGENT_MODEL", "local"),
        base_url=os.environ["OPENAI_BASE_URL"],
        api_key=os.environ.get("OPENAI_API_KEY", "none"),
        temperature=0,
        max_tokens=MAX_TOKENS,
        max_retries=0,
    )
    as_tool = tool(parse_docstring=True)
    lookups = [as_tool(city_facts), as_tool(country_facts), as_tool(sales_total)]
    maths = [as_tool(calculate), as_tool(convert_units)]
    researcher_model = model.bind_tools(lookups)
    analyst_model = model.bind_tools(maths)

    def researcher(state: MessagesState) -> dict[str, list[Any]]:
        reply = researcher_model.invoke([SystemMessage(RESEARCHER), *state["messages"]])
        return {"messages": [reply]}

    def analyst(state: MessagesState) -> dict[str, list[Any]]:
        view = analyst_view(state["messages"])
        reply = analyst_model.invoke([SystemMessage(ANALYST), *view])
        return {"messages": [reply]}

    def after(agent: str, tools: str) -> Any:
        def route(state: MessagesState) -> str:
            return tools if state["messages"][-1].tool_calls else agent

        return route

    graph = StateGraph(MessagesState)
    graph.add_node("researcher", researcher)
    graph.add_node("researcher_tools", ToolNode(lookups))
    graph.add_node("analyst", analyst)
    graph.add_node("analyst_tools", ToolNode(maths))
    graph.add_edge(START, "researcher")
    graph.add_conditional_edges(
        "researcher", after("analyst", "researcher_tools"), ["researcher_tools", "analyst"]
    )
    graph.add_edge("researcher_tools", "researcher")
    graph.add_conditional_edges("analyst", after(END, "analyst_tools"), ["analyst_tools", END])
    graph.add_edge("analyst_tools", "analyst")
    return graph.compile()


def main() -> int:
    task = read_task()
    provider = tracer_provider("corpus-langgraph")
    LangChainInstrumentor().instrument(tracer_provider=provider)
    try:
        state = build_graph().invoke({"messages": [HumanMessage(task)]}, {"recursion_limit": 16})
        print(answer_line(state["messages"][-1].content))
    finally:
        provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
