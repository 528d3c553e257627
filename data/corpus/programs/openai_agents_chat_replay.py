"""Recorded tool-calling conversations replayed through the OpenAI Agents SDK, traced by
openinference-instrumentation-openai-agents, so that the sidecar receives them as it would
receive a live customer chat: one `Runner.run` per customer turn inside one `trace()`, the
customer's later turns only inside the model calls' inputs, each tool call a tool span.

The model is the scripted server of `chat_replay` (not a model); a function tool per
recorded tool name returns the recorded report. Input and output: `chat_replay`.

    python openai_agents_chat_replay.py RECORDS.jsonl > replayed.jsonl

Spans go wherever the standard OTLP environment variables point (`corpus_tracing`).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import agents
import chat_replay
from agents import Agent, FunctionTool, ModelSettings, OpenAIChatCompletionsModel, Runner
from chat_replay import Replay, Scripted, recorded_report
from openai import AsyncOpenAI
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer


def tool(name: str, reports: dict[str, deque[tuple[str, str]]]) -> FunctionTool:
    """A function tool answering with the recorded report (`chat_replay.recorded_report`)."""

    async def invoke(context: Any, arguments: str) -> str:
        report: str = recorded_report(reports, name, arguments)
        return report

    return FunctionTool(
        name=name,
        description=f"The recorded {name} tool.",
        params_json_schema={"type": "object", "properties": {}, "additionalProperties": True},
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )


def replayer(tracer: Tracer) -> Replay:
    """The SDK groups a conversation itself (`agents.trace`): `tracer` is not needed."""

    async def replay(record: Any, scripted: Scripted, base_url: str) -> dict[str, Any]:
        chat = chat_replay.conversation(record)
        client = AsyncOpenAI(base_url=base_url, api_key="scripted", max_retries=0)
        agent = Agent(
            name="assistant",
            instructions=chat.instructions,
            tools=[tool(name, chat.reports) for name in sorted(chat.reports)],
            model=OpenAIChatCompletionsModel(model="scripted", openai_client=client),
            model_settings=ModelSettings(parallel_tool_calls=True),
        )
        history: list[Any] = []

        async def ask(text: str) -> None:
            nonlocal history
            result = await Runner.run(
                agent, [*history, {"role": "user", "content": text}], max_turns=200
            )
            history = result.to_input_list()

        with agents.trace(f"chat {record['id']}"):
            line: dict[str, Any] = await chat_replay.converse(record, chat, scripted, ask)
        return line

    return replay


def instrument(provider: TracerProvider) -> None:
    # Imported here: the conformance suite also replays under another instrumentation.
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    # Only the OpenInference processor runs: the SDK's own one exports to OpenAI.
    agents.set_trace_processors([])
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)


if __name__ == "__main__":
    chat_replay.main(instrument, replayer)
