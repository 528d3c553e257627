"""The returns desk's two roles, shared by its programs on every framework
(`llamaindex_desk.py`, `autogen_desk.py`, `adk_desk.py`). The LlamaIndex recordings were
made with `clerk(example=True)`: a replayed request must equal the recorded one."""

from __future__ import annotations

__all__ = ["CASHIER", "clerk"]

_EXAMPLE = ', for example {"name": "order_details", "arguments": {"order_id": "#W2611340"}}'

CASHIER = (
    "You are the Cashier of an online shop. Answer the customer's question from the "
    "figures in the Clerk's note. Use the calculate tool for any arithmetic. End with one "
    "line that holds only the answer."
)


def clerk(*, example: bool = False) -> str:
    """The Clerk's instructions; `example`: with a tool call written out."""
    return (
        "You are the Clerk of an online shop. Look up the orders, customers or products the "
        f"question names with the tools{_EXAMPLE if example else ''}. Then write a short note "
        "for the Cashier with the exact names, ids and prices from the tool results that the "
        "question needs. Do not answer the question yourself."
    )
