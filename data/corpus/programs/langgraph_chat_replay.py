"""Recorded tool-calling conversations replayed through LangGraph (`create_react_agent`
with LangChain's ChatOpenAI), traced by openinference-instrumentation-langchain, so that
the sidecar receives them as it would receive a live customer chat: one graph invocation
per customer turn, given the messages so far, all under one `chat` span of the service's
own (LangGraph starts a trace per invocation), the customer's later turns only inside the
model calls' inputs, each tool call a tool span.

The model is the scripted server of `chat_replay` (not a model); a tool per recorded tool
name returns the recorded report. Input and output: `chat_replay`.

    python langgraph_chat_replay.py RECORDS.jsonl > replayed.jsonl

Spans go wherever the standard OTLP environment variables point (`corpus_tracing`).
"""

from __future__ import annotations

from typing import Any

import chat_replay
from chat_replay import Replay, Scripted
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer

OPEN_SCHEMA = {"type": "object", "properties": {}, "additionalProperties": True}


def replayer(tracer: Tracer) -> Replay:
    async def replay(record: Any, scripted: Scripted, base_url: str) -> dict[str, Any]:
        chat = chat_replay.conversation(record)
        model = ChatOpenAI(base_url=base_url, api_key="scripted", model="scripted", max_retries=0)
        tools = [
            StructuredTool.from_function(
                chat_replay.keyword_tool(chat.reports, name),
                name=name,
                description=f"The recorded {name} tool.",
                args_schema=OPEN_SCHEMA,
            )
            for name in sorted(chat.reports)
        ]
        graph = create_react_agent(model, tools, prompt=chat.instructions, name="assistant")
        history: list[AnyMessage] = []

        async def ask(text: str) -> None:
            nonlocal history
            state = await graph.ainvoke(
                {"messages": [*history, HumanMessage(text)]}, {"recursion_limit": 500}
            )
            history = state["messages"]

        with tracer.start_as_current_span("chat"):
            line: dict[str, Any] = await chat_replay.converse(record, chat, scripted, ask)
        return line

    return replay


def instrument(provider: TracerProvider) -> None:
    # Imported here: the conformance suite also replays under another instrumentation.
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=provider)


if __name__ == "__main__":
    chat_replay.main(instrument, replayer)
