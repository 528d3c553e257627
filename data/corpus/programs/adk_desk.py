"""A Google ADK returns desk: a SequentialAgent of two LlmAgents (LiteLLM as the model
client). The Clerk looks the question up with the shop's JSON tools and writes a note;
then the Cashier, who sees the session so far (the question and the Clerk's calls,
results and note, which ADK hands it as context), answers it, with the calculator for any
arithmetic. Traced by openinference-instrumentation-google-adk and ADK's own spans (to the
global tracer provider).

    echo "What did the Desk Lamp in order #W4817420 cost?" | python adk_desk.py
"""

from __future__ import annotations

import asyncio
import os
import sys

# LiteLLM reads its price list from the package, not the network; ADK's spans follow the
# current semantic conventions.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN", "1")

from corpus_tools import MAX_TOKENS, answer_line, calculate, read_task
from corpus_tracing import tracer_provider
from desk_prompts import CASHIER, clerk
from google.adk.agents import LlmAgent, SequentialAgent
from google.adk.models.lite_llm import LiteLlm
from google.adk.runners import InMemoryRunner
from google.genai import types
from openinference.instrumentation.google_adk import GoogleADKInstrumentor
from opentelemetry import trace
from shop_tools import customer_orders, order_details, product_variants

APP = "returns_desk"
CLERK = clerk()


def desk() -> SequentialAgent:
    model = LiteLlm(
        model="openai/" + os.environ.get("FAULTFINDER_AGENT_MODEL", "local"),
        api_base=os.environ["OPENAI_BASE_URL"],
        api_key=os.environ.get("OPENAI_API_KEY", "none"),
        temperature=0,
        max_tokens=MAX_TOKENS,
        timeout=600,
    )
    clerk = LlmAgent(
        name="Clerk",
        model=model,
        description="Looks up orders, customers and products.",
        instruction=CLERK,
        tools=[order_details, customer_orders, product_variants],
    )
    cashier = LlmAgent(
        name="Cashier",
        model=model,
        description="Answers from the Clerk's note, with the calculator.",
        instruction=CASHIER,
        tools=[calculate],
    )
    return SequentialAgent(name="ReturnsDesk", sub_agents=[clerk, cashier])


async def ask(task: str) -> str:
    """One invocation through ADK's runner: the text of the last final response."""
    runner = InMemoryRunner(agent=desk(), app_name=APP)
    session = await runner.session_service.create_session(app_name=APP, user_id="customer")
    message = types.Content(role="user", parts=[types.Part(text=task)])
    final = ""
    async for event in runner.run_async(
        user_id="customer", session_id=session.id, new_message=message
    ):
        if event.is_final_response() and event.content and event.content.parts:
            final = "".join(part.text or "" for part in event.content.parts)
    return final


def main() -> int:
    task = read_task()
    provider = tracer_provider("corpus-adk-desk")
    # ADK traces to the global provider; the instrumentation to the one given.
    trace.set_tracer_provider(provider)
    GoogleADKInstrumentor().instrument(tracer_provider=provider)
    try:
        print(answer_line(asyncio.run(ask(task))))
    finally:
        provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
