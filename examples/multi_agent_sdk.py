"""A scripted three-agent team that gets a shopping total wrong, recorded with the SDK.

No LLM is involved: every agent follows a fixed script. PriceLookup's catalog tool has
no entry for pens and raises; the agent then guesses a price instead of reporting the
gap (the decisive mistake), the Calculator works with the guess and the Orchestrator
answers a wrong total, which the grader marks as a failed run.

    python examples/multi_agent_sdk.py

Spans go to $FAULTFINDER_ENDPOINT, else $OTEL_EXPORTER_OTLP_ENDPOINT, else the local
sidecar at http://127.0.0.1:4318. The program prints the run id to query it by.
"""

from __future__ import annotations

from faultfinder.sdk import Run, agent, agent_step, configure, handoff, message, run, shutdown, tool

TASK = "What do 3 notebooks and 2 pens cost in total, including 20% VAT?"
GROUND_TRUTH = "19.08 EUR"
ORDER = {"notebook": 3, "pen": 2}
VAT = 0.20
CATALOG = {"notebook": 4.50}
"""The shop's catalog service; pens are missing from it."""
GUESSED_PRICE = 1.00


class CatalogError(LookupError):
    """The catalog has no entry for an item."""


@tool("catalog.lookup")
def lookup_price(item: str) -> float:
    if item not in CATALOG:
        raise CatalogError(f"no catalog entry for {item!r}")
    return CATALOG[item]


@tool("calculator")
def total_with_vat(lines: list[tuple[int, float]], vat: float) -> float:
    return round(sum(quantity * price for quantity, price in lines) * (1 + vat), 2)


def orchestrator_plan(task: str) -> None:
    with agent_step("Orchestrator", input=task) as step:
        step.say("Plan: PriceLookup finds the unit prices, Calculator adds them up with VAT.")
    handoff("Orchestrator", "PriceLookup", "Find the unit prices of notebooks and pens.")


def price_lookup(items: list[str]) -> dict[str, float]:
    prices: dict[str, float] = {}
    with agent_step("PriceLookup") as step:
        for item in items:
            try:
                prices[item] = lookup_price(item)
            except CatalogError:
                # The scripted mistake: guess instead of reporting that the price is unknown.
                prices[item] = GUESSED_PRICE
                step.say(
                    f"The catalog has no {item}s; they usually cost {GUESSED_PRICE:.2f} EUR, "
                    "so I will use that."
                )
        step.say(", ".join(f"{item}: {price:.2f} EUR" for item, price in prices.items()))
        handoff("PriceLookup", "Calculator", "Add up the order with these prices and 20% VAT.")
    return prices


@agent("Calculator")
def calculator(prices: dict[str, float]) -> str:
    lines = [(ORDER[item], price) for item, price in prices.items()]
    return f"Total with 20% VAT: {total_with_vat(lines, VAT):.2f} EUR"


def solve() -> Run:
    """Run the team once; the returned run carries its id and outcome."""
    with run(task=TASK, ground_truth=GROUND_TRUTH, framework="scripted") as current:
        orchestrator_plan(TASK)
        prices = price_lookup(list(ORDER))
        calculation = calculator(prices)
        answer = calculation.rsplit(": ", 1)[-1]
        message("Orchestrator", f"Final answer: {answer}")
        if answer == GROUND_TRUTH:
            current.succeed(answer)
        else:
            current.fail(f"answered {answer}, expected {GROUND_TRUTH}", final_answer=answer)
    return current


def main() -> int:
    configure(service_name="shopping-team", project="examples")
    finished = solve()
    shutdown()  # sends the spans still queued before the program exits
    print(f"run {finished.run_id} finished: {finished.outcome}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
