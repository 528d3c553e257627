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
from collections.abc import Mapping
from typing import Any

import agents
import chat_replay
from agents import Agent, FunctionTool, ModelSettings, OpenAIChatCompletionsModel, Runner
from chat_replay import Scripted, recorded_report
from corpus_tracing import tracer_provider
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor


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


async def replay(record: Mapping[str, Any], scripted: Scripted, base_url: str) -> dict[str, Any]:
    chat = chat_replay.conversation(record)
    client = AsyncOpenAI(base_url=base_url, api_key="scripted", max_retries=0)
    agent = Agent(
        name="assistant",
        instructions=chat.instructions,
        tools=[tool(name, chat.reports) for name in sorted(chat.reports)],
        model=OpenAIChatCompletionsModel(model="scripted", openai_client=client),
        model_settings=ModelSettings(parallel_tool_calls=True),
    )
    scripted.served = []
    history: list[Any] = []
    asked: list[int] = []
    with agents.trace(f"chat {record['id']}"):
        for step, text, segment in chat_replay.turns_to_ask(chat):
            asked.append(step)
            scripted.queue = deque(segment)
            history.append({"role": "user", "content": text})
            result = await Runner.run(agent, history, max_turns=200)
            history = result.to_input_list()
    line: dict[str, Any] = chat_replay.replayed(record, chat, scripted, asked)
    return line


def main() -> None:
    agents.set_trace_processors([])
    traces = chat_replay.Traces()
    provider = tracer_provider("tau-bench-replay")
    provider.add_span_processor(traces)
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    chat_replay.main(replay, traces)
    provider.shutdown()


if __name__ == "__main__":
    main()
