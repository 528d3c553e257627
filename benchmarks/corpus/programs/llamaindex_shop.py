"""A LlamaIndex shop desk: an AgentWorkflow where a Clerk with the shop's JSON tools
(orders, a customer's orders, a product's variants) answers, handing off to a Cashier
with the calculator for any arithmetic; traced by openinference-instrumentation-llama-index.

    echo "What is the total of order #W4817420?" | python llamaindex_shop.py
"""

from __future__ import annotations

import asyncio
import os
import sys

from corpus_tools import MAX_TOKENS, answer_line, calculate, read_task
from corpus_tracing import tracer_provider
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai_like import OpenAILike
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from shop_tools import customer_orders, order_details, product_variants

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
    model = OpenAILike(
        model=os.environ.get("FAULTFINDER_AGENT_MODEL", "local"),
        api_base=os.environ["OPENAI_BASE_URL"],
        api_key=os.environ.get("OPENAI_API_KEY", "none"),
        is_chat_model=True,
        is_function_calling_model=True,
        temperature=0,
        max_tokens=MAX_TOKENS,
        max_retries=0,
        timeout=600,
    )
    clerk = FunctionAgent(
        name="Clerk",
        description="Looks up orders, customers and products.",
        system_prompt=CLERK,
        tools=[
            FunctionTool.from_defaults(order_details),
            FunctionTool.from_defaults(customer_orders),
            FunctionTool.from_defaults(product_variants),
        ],
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
