"""What the LlamaIndex shop programs share: the model every agent calls and the Clerk's
tools. Both programs' recordings were made with exactly these settings (a replayed
request must equal the recorded one)."""

from __future__ import annotations

import os

from corpus_tools import MAX_TOKENS
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai_like import OpenAILike
from shop_tools import customer_orders, order_details, product_variants


def agent_model() -> OpenAILike:
    """The agents' model: `$OPENAI_BASE_URL`, temperature 0, at most `MAX_TOKENS` a call."""
    return OpenAILike(
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


def clerk_tools() -> list[FunctionTool]:
    """The shop's lookups: an order's items, a customer's orders, a product's variants."""
    return [
        FunctionTool.from_defaults(order_details),
        FunctionTool.from_defaults(customer_orders),
        FunctionTool.from_defaults(product_variants),
    ]
