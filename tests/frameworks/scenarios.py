"""The scenarios every conformance module plays: the census question whose answer
misstates the figure its tool gave, and the records scenarios whose claims the tool's own
records prove wrong; and what a user knows of each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tests.frameworks.scripted_openai import Reply, call, say

__all__ = [
    "CENSUS",
    "FLIGHTS",
    "GROUND_TRUTH",
    "ORDER",
    "RECORD_SCENARIOS",
    "SHOP_ROLE",
    "STOCK",
    "TASK",
    "TIMED_OUT",
    "WRONG",
    "CensusDown",
    "Expected",
    "RecordScenario",
    "census_answer",
    "expected_census",
    "first_reply_only",
]

# The census scenario every module plays: the user asks for Lyon's population, an agent
# looks it up with a census tool, and the answer misstates the figure the tool gave.
TASK = "What is the population of Lyon?"
"""The user's text."""
CENSUS = "Lyon: 522,250 inhabitants (census 2021)"
"""The census tool's result."""
WRONG = "Lyon has 225,520 inhabitants."
"""The planted flaw: the digits of the census figure, transposed."""
GROUND_TRUTH = "522,250"
"""What the user posts with the failed outcome, once the answer is found wrong."""
TIMED_OUT = "census service timed out"
"""The census tool's error, when it fails."""


# The records scenarios: a tool returns records, and the agent says of them what its
# tool's own records prove wrong. One agent, "shop_agent", plays them; its instructions
# carry `SHOP_ROLE`, and its three tools return `FLIGHTS`, `ORDER` and `STOCK` as they are.
SHOP_ROLE = "SHOP-ROLE"
FLIGHTS: list[dict[str, object]] = [
    {"flight": "TP 433", "eur": 89, "departs": "07:05"},
    {"flight": "AF 1024", "eur": 140, "departs": "09:10"},
]
"""`flight_search`'s records, a list of dicts."""
ORDER: dict[str, object] = {
    "order_id": "#W2611340",
    "items": [
        {"name": "Water Bottle", "item_id": "6469567736", "price": 47.84},
        {"name": "Office Chair", "item_id": "8426249116", "price": 488.81},
    ],
}
"""`order_details`'s order, its items a list inside it."""
STOCK = (
    "Warehouse Leeds: stock 1,240 units; capacity 2,000 units; dock doors 6\n"
    "Warehouse Bristol: stock 310 units; capacity 800 units; dock doors 2"
)
"""`warehouse_stock`'s report: prose, one record a line (`Name: field value; …`)."""


@dataclass(frozen=True)
class RecordScenario:
    """One call of a records tool, then the planted claim, graded wrong afterwards."""

    name: str
    tool: str
    arguments: Mapping[str, str]
    task: str
    claim: str
    """The planted flaw."""
    ground_truth: str
    why: str
    """What the zero-LLM attributors must say of the claim."""

    def script(self) -> dict[str, list[Reply]]:
        return {SHOP_ROLE: [call(self.tool, **self.arguments), say(self.claim)]}


RECORD_SCENARIOS = (
    RecordScenario(
        "superlative",
        "flight_search",
        {"origin": "CDG", "destination": "LIS"},
        task="Which is the cheapest Friday flight from Paris to Lisbon?",
        # TP 433 is the cheapest, by the search's own list.
        claim="The cheapest Friday flight is AF 1024, departing at 09:10.",
        ground_truth="TP 433",
        why="called AF 1024 the cheapest after flight_search had returned TP 433 with eur 89",
    ),
    RecordScenario(
        "figure-of-another-record",
        "order_details",
        {"order_id": "#W2611340"},
        task="How much do I get back if I return the office chair of order #W2611340?",
        # The water bottle's price, given to the chair.
        claim="Returning the Office Chair refunds 47.84 to your card.",
        ground_truth="488.81",
        why="gave Office Chair the figure 47.84, which order_details had returned as the price"
        " of Water Bottle (Office Chair's is 488.81)",
    ),
    RecordScenario(
        "figure-given-to-another-name",
        "warehouse_stock",
        {"region": "north"},
        task="Which northern warehouse can ship a 900-unit order today, and from what stock?",
        # Leeds's stock, given to a warehouse the report does not list.
        claim="Ship it from Warehouse York, which has a stock of 1,240 units.",
        ground_truth="Warehouse Leeds",
        why="gave Warehouse York the figure 1,240, which warehouse_stock had returned as the"
        " stock of Warehouse Leeds",
    ),
)


class CensusDown(RuntimeError):
    """The census service did not answer."""


def census_answer(city: str, *, fails: bool = False) -> str:
    """The census tool's body: `CENSUS`, or (`fails`) `CensusDown`."""
    if fails:
        raise CensusDown(f"{TIMED_OUT} for {city}")
    return CENSUS


def first_reply_only(
    script: Mapping[str, Sequence[Reply]], *keys: str
) -> dict[str, Sequence[Reply]]:
    """`script` with only the first reply of each of `keys`: for a tool call that ends
    the run, after which those agents say nothing more."""
    return {key: replies[:1] if key in keys else replies for key, replies in script.items()}


@dataclass(frozen=True)
class Expected:
    """What a user of the framework knows about the invocation they made."""

    agents: Sequence[str]
    """The agents by the names the framework gave them (order is not checked)."""
    task: str
    """The user's text."""
    tools: Mapping[str, str] = field(default_factory=dict)
    """Each tool the agents called → the agent that called it."""
    tool_results: Mapping[str, str] = field(default_factory=dict)
    """Each tool → the text of its result as the tool returned it."""
    final_answer: str | None = None
    """Text the run's final answer contains (None: not checked)."""


def expected_census(
    agents: Sequence[str], tools: Mapping[str, str], *, final_answer: str = "225,520"
) -> Expected:
    """What the census scenario's user knows: `TASK`, the census tool's result `CENSUS`,
    and the wrong figure in the final answer; `agents` and `tools` as in `Expected`."""
    return Expected(
        agents=agents,
        task=TASK,
        tools=tools,
        tool_results={"census_lookup": CENSUS},
        final_answer=final_answer,
    )
