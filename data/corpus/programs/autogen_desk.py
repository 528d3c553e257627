"""An AutoGen AgentChat returns desk: a RoundRobinGroupChat of two AssistantAgents. The
Clerk looks the question up with the shop's JSON tools and posts a note to the chat; the
Cashier, who sees the chat (the question and the Clerk's note, not the Clerk's tool
calls), answers it, with the calculator for any arithmetic; the team stops once the
Cashier has spoken. Traced by openinference-instrumentation-autogen-agentchat and by
autogen-core's own spans (to the global tracer provider).

    echo "What did the Desk Lamp in order #W4817420 cost?" | python autogen_desk.py
"""

from __future__ import annotations

import asyncio
import os
import sys

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination, SourceMatchTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_ext.models.openai import OpenAIChatCompletionClient
from corpus_tools import MAX_TOKENS, answer_line, calculate, read_task
from corpus_tracing import tracer_provider
from desk_prompts import CASHIER, clerk
from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor
from opentelemetry import trace
from shop_tools import customer_orders, order_details, product_variants

CLERK = clerk()


def model_client() -> OpenAIChatCompletionClient:
    """The agents' model: `$OPENAI_BASE_URL`, temperature 0, at most `MAX_TOKENS` a call."""
    return OpenAIChatCompletionClient(
        model=os.environ.get("FAULTFINDER_AGENT_MODEL", "local"),
        base_url=os.environ["OPENAI_BASE_URL"],
        api_key=os.environ.get("OPENAI_API_KEY", "none"),
        temperature=0,
        max_tokens=MAX_TOKENS,
        max_retries=0,
        timeout=600,
        model_info={
            "vision": False,
            "function_calling": True,
            "json_output": False,
            "family": "unknown",
            "structured_output": False,
        },
    )


def desk() -> RoundRobinGroupChat:
    client = model_client()
    clerk = AssistantAgent(
        "Clerk",
        model_client=client,
        description="Looks up orders, customers and products.",
        system_message=CLERK,
        tools=[order_details, customer_orders, product_variants],
        reflect_on_tool_use=True,
        max_tool_iterations=4,
    )
    cashier = AssistantAgent(
        "Cashier",
        model_client=client,
        description="Answers from the Clerk's note, with the calculator.",
        system_message=CASHIER,
        tools=[calculate],
        reflect_on_tool_use=True,
        max_tool_iterations=3,
    )
    done = SourceMatchTermination(["Cashier"]) | MaxMessageTermination(6)
    return RoundRobinGroupChat([clerk, cashier], termination_condition=done)


def main() -> int:
    task = read_task()
    provider = tracer_provider("corpus-autogen-desk")
    # autogen-core traces to the global provider; the instrumentation to the one given.
    trace.set_tracer_provider(provider)
    AutogenAgentChatInstrumentor().instrument(tracer_provider=provider)
    try:
        result = asyncio.run(desk().run(task=task))
        last = result.messages[-1] if result.messages else None
        print(answer_line(str(getattr(last, "content", "") or "")))
    finally:
        provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
