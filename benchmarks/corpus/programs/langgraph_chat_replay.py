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

import json
from collections import deque
from collections.abc import Mapping
from typing import Any

import chat_replay
from chat_replay import Scripted, recorded_report
from corpus_tracing import tracer_provider
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.trace import Tracer


def tool(name: str, reports: dict[str, deque[tuple[str, str]]]) -> StructuredTool:
    """A tool answering with the recorded report (`chat_replay.recorded_report`)."""

    def invoke(**arguments: Any) -> str:
        report: str = recorded_report(reports, name, json.dumps(arguments))
        return report

    return StructuredTool.from_function(
        invoke,
        name=name,
        description=f"The recorded {name} tool.",
        args_schema={"type": "object", "properties": {}, "additionalProperties": True},
    )


def replayer(tracer: Tracer) -> Any:
    async def replay(
        record: Mapping[str, Any], scripted: Scripted, base_url: str
    ) -> dict[str, Any]:
        chat = chat_replay.conversation(record)
        model = ChatOpenAI(base_url=base_url, api_key="scripted", model="scripted", max_retries=0)
        graph = create_react_agent(
            model,
            [tool(name, chat.reports) for name in sorted(chat.reports)],
            prompt=chat.instructions,
            name="assistant",
        )
        scripted.served = []
        history: list[AnyMessage] = []
        asked: list[int] = []
        with tracer.start_as_current_span("chat"):
            for step, text, segment in chat_replay.turns_to_ask(chat):
                asked.append(step)
                scripted.queue = deque(segment)
                state = await graph.ainvoke(
                    {"messages": [*history, HumanMessage(text)]}, {"recursion_limit": 500}
                )
                history = state["messages"]
        line: dict[str, Any] = chat_replay.replayed(record, chat, scripted, asked)
        return line

    return replay


def main() -> None:
    traces = chat_replay.Traces()
    provider = tracer_provider("tau-bench-replay")
    provider.add_span_processor(traces)
    LangChainInstrumentor().instrument(tracer_provider=provider)
    chat_replay.main(replayer(provider.get_tracer("tau-bench-replay")), traces)
    provider.shutdown()


if __name__ == "__main__":
    main()
