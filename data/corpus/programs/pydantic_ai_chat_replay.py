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

from typing import Any

import chat_replay
from chat_replay import Replay, Scripted
from openai import AsyncOpenAI
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer
from pydantic_ai import Agent, InstrumentationSettings, Tool
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

OPEN_SCHEMA = {"type": "object", "properties": {}, "additionalProperties": True}


def replayer(tracer: Tracer) -> Replay:
    async def replay(record: Any, scripted: Scripted, base_url: str) -> dict[str, Any]:
        chat = chat_replay.conversation(record)
        client = AsyncOpenAI(base_url=base_url, api_key="scripted", max_retries=0)
        model = OpenAIChatModel("scripted", provider=OpenAIProvider(openai_client=client))
        tools = [
            Tool.from_schema(
                chat_replay.keyword_tool(chat.reports, name),
                name=name,
                description=f"The recorded {name} tool.",
                json_schema=OPEN_SCHEMA,
            )
            for name in sorted(chat.reports)
        ]
        agent: Agent[None, str] = Agent(
            model, name="assistant", instructions=chat.instructions, output_type=str, tools=tools
        )
        history: list[ModelMessage] = []

        async def ask(text: str) -> None:
            nonlocal history
            result = await agent.run(text, message_history=history)
            history = result.all_messages()

        with tracer.start_as_current_span("chat"):
            line: dict[str, Any] = await chat_replay.converse(record, chat, scripted, ask)
        return line

    return replay


def instrument(provider: TracerProvider) -> None:
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))


if __name__ == "__main__":
    chat_replay.main(instrument, replayer)
