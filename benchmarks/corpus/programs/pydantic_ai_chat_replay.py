"""Recorded tool-calling conversations replayed through pydantic-ai, traced by its own
instrumentation (`Agent.instrument_all`), so that the sidecar receives them as it would
receive a live customer chat: one `Agent.run` per customer turn, given the messages so
far, all inside one `chat` span of the service's own (pydantic-ai starts a trace per run;
a service groups a conversation under a span of its own), the customer's later turns only
inside the model calls' inputs, each tool call a tool span.

The model is the scripted server of `chat_replay` (not a model); a tool per recorded tool
name returns the recorded report. Input and output: `chat_replay`.

    python pydantic_ai_chat_replay.py RECORDS.jsonl > replayed.jsonl

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
from openai import AsyncOpenAI
from opentelemetry.trace import Tracer
from pydantic_ai import Agent, InstrumentationSettings, Tool
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider


def tool(name: str, reports: dict[str, deque[tuple[str, str]]]) -> Tool[Any]:
    """A tool answering with the recorded report (`chat_replay.recorded_report`)."""

    def invoke(**arguments: Any) -> str:
        report: str = recorded_report(reports, name, json.dumps(arguments))
        return report

    return Tool.from_schema(
        invoke,
        name=name,
        description=f"The recorded {name} tool.",
        json_schema={"type": "object", "properties": {}, "additionalProperties": True},
    )


def replayer(tracer: Tracer) -> Any:
    async def replay(
        record: Mapping[str, Any], scripted: Scripted, base_url: str
    ) -> dict[str, Any]:
        chat = chat_replay.conversation(record)
        client = AsyncOpenAI(base_url=base_url, api_key="scripted", max_retries=0)
        model = OpenAIChatModel("scripted", provider=OpenAIProvider(openai_client=client))
        agent: Agent[None, str] = Agent(
            model,
            name="assistant",
            instructions=chat.instructions,
            output_type=str,
            tools=[tool(name, chat.reports) for name in sorted(chat.reports)],
        )
        scripted.served = []
        history: list[ModelMessage] = []
        asked: list[int] = []
        with tracer.start_as_current_span("chat"):
            for step, text, segment in chat_replay.turns_to_ask(chat):
                asked.append(step)
                scripted.queue = deque(segment)
                result = await agent.run(text, message_history=history)
                history = result.all_messages()
        line: dict[str, Any] = chat_replay.replayed(record, chat, scripted, asked)
        return line

    return replay


def main() -> None:
    traces = chat_replay.Traces()
    provider = tracer_provider("tau-bench-replay")
    provider.add_span_processor(traces)
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    chat_replay.main(replayer(provider.get_tracer("tau-bench-replay")), traces)
    provider.shutdown()


if __name__ == "__main__":
    main()
