"""A LlamaIndex shop desk: an AgentWorkflow where a Clerk with the shop's JSON tools
(orders, a customer's orders, a product's variants) answers, handing off to a Cashier
with the calculator for any arithmetic; traced by openinference-instrumentation-llama-index.

    echo "What is the total of order #W4817420?" | python llamaindex_shop.py
"""

from __future__ import annotations

import asyncio
import sys

from corpus_tools import answer_line, calculate, read_task
from corpus_tracing import tracer_provider
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.tools import FunctionTool
from llamaindex_parts import agent_model, clerk_tools
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

CLERK = (
    "You are the Clerk of an online shop. Look up the orders, customers or products the "
    'question names with the tools, for example {"name": "order_details", "arguments": '
    '{"order_id": "#W2611340"}}. For any arithmetic, hand off to the Cashier with the '
    "figures it needs. Otherwise end with one line that holds only the answer."
)
CASHIER = (
    "You are the Cashier. Use the calculate tool for the arithmetic asked. "
    "End with one line that holds only the result."
)


def workflow() -> AgentWorkflow:
    model = agent_model()
    clerk = FunctionAgent(
        name="Clerk",
        description="Looks up orders, customers and products.",
        system_prompt=CLERK,
        tools=clerk_tools(),
        llm=model,
        can_handoff_to=["Cashier"],
    )
    cashier = FunctionAgent(
        name="Cashier",
        description="Does the arithmetic on figures the Clerk found.",
        system_prompt=CASHIER,
        tools=[FunctionTool.from_defaults(calculate)],
        llm=model,
    )
    return AgentWorkflow(agents=[clerk, cashier], root_agent="Clerk")


def main() -> int:
    task = read_task()
    provider = tracer_provider("corpus-llamaindex-shop")
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    try:

        async def run() -> object:
            return await workflow().run(user_msg=task, max_iterations=12)

        print(answer_line(str(asyncio.run(run()))))
    finally:
        provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
