"""The shopping team of `multi_agent_sdk.py` as pydantic-ai agents on a real model, traced
by pydantic-ai's own OpenTelemetry instrumentation.

Orchestrator, PriceLookup and Calculator are pydantic-ai agents; every model request and
tool call is a span pydantic-ai records itself (GenAI semantic conventions). faultfinder's
SDK only exports those spans and opens the run they belong to. The catalog has no entry
for pens, so its lookup fails; the program then asks PriceLookup to estimate the price
instead of reporting the gap (the planted mistake), the Calculator works with the guess
and the answer is graded against the known total.

    faultfinder llm serve --model smollm2      # or any OpenAI-compatible endpoint
    python examples/framework_pydantic_ai.py

Environment: OPENAI_BASE_URL (default http://127.0.0.1:8080/v1, `faultfinder llm serve`),
OPENAI_API_KEY (default `local`), OPENAI_MODEL (default `local`). Spans go to
$FAULTFINDER_ENDPOINT, else $OTEL_EXPORTER_OTLP_ENDPOINT, else the local sidecar at
http://127.0.0.1:4318. The program prints the run id to query it by.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic_ai import Agent, InstrumentationSettings, ModelSettings, ToolOutput
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.profiles.openai import OpenAIModelProfile
from pydantic_ai.providers.openai import OpenAIProvider

from faultfinder.sdk import Run, configure, message, run, shutdown

TASK = "What do 3 notebooks and 2 pens cost in total, including 20% VAT?"
GROUND_TRUTH = "19.08 EUR"
ORDER = {"notebook": 3, "pen": 2}
VAT = 0.20
CATALOG = {"notebook": 4.50}
"""The shop's catalog service; pens are missing from it."""

Item = Literal["notebook", "pen"]


class CatalogError(LookupError):
    """The catalog has no entry for an item."""


def chat_model() -> OpenAIChatModel:
    """The model behind every agent: any OpenAI-compatible chat endpoint."""
    return OpenAIChatModel(
        os.environ.get("OPENAI_MODEL", "local"),
        provider=OpenAIProvider(
            base_url=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"),
            api_key=os.environ.get("OPENAI_API_KEY", "local"),
        ),
        # llama.cpp's server reads `max_tokens`, not OpenAI's newer `max_completion_tokens`.
        profile=OpenAIModelProfile(openai_chat_supports_max_completion_tokens=False),
    )


def calling(tool: str, max_tokens: int = 48) -> ModelSettings:
    """Settings that make the model answer by calling `tool` (a named OpenAI `tool_choice`).

    Small local models seldom call a tool unasked, and llama.cpp's server honours only a
    named tool choice (it ignores "required"); naming the tool keeps the team's shape the
    same on any model. Each agent answers through its tool, so each run is one request.
    """
    return ModelSettings(
        temperature=0,
        max_tokens=max_tokens,
        extra_body={"tool_choice": {"type": "function", "function": {"name": tool}}},
    )


def lookup_price(item: Item) -> float:
    """The catalog's unit price of one item, in EUR."""
    if item not in CATALOG:
        raise CatalogError(f"no catalog entry for {item!r}")
    return CATALOG[item]


def estimate_price(price_eur: float) -> float:
    """Your estimate of the item's unit price, in EUR."""
    return price_eur


def total_with_vat(notebook_eur: float, pen_eur: float) -> float:
    """The order's total including VAT, from the unit prices in EUR."""
    net = ORDER["notebook"] * notebook_eur + ORDER["pen"] * pen_eur
    return round(net * (1 + VAT), 2)


def build_team(
    model: OpenAIChatModel,
) -> tuple[Agent[None, str], Agent[None, float], Agent[None, float]]:
    """Orchestrator (plans in words), PriceLookup (asks the catalog), Calculator (adds up)."""
    orchestrator = Agent(
        model,
        name="Orchestrator",
        instructions="You coordinate a shopping team. Say in one sentence who does what.",
        model_settings=ModelSettings(temperature=0, max_tokens=24),
    )
    price_lookup = Agent(
        model,
        name="PriceLookup",
        instructions="You find unit prices in the shop's catalog.",
        output_type=ToolOutput(lookup_price, name="catalog_lookup"),
        model_settings=calling("catalog_lookup"),
    )
    calculator = Agent(
        model,
        name="Calculator",
        instructions="You add up orders including VAT.",
        output_type=ToolOutput(total_with_vat, name="total_with_vat"),
        model_settings=calling("total_with_vat"),
    )
    return orchestrator, price_lookup, calculator


def solve(model: OpenAIChatModel) -> Run:
    """Run the team once; the returned run carries its id and outcome."""
    orchestrator, price_lookup, calculator = build_team(model)
    with run(task=TASK, ground_truth=GROUND_TRUTH, framework="pydantic-ai") as current:
        orchestrator.run_sync(f"{TASK} PriceLookup finds prices, Calculator adds them up.")
        prices: dict[str, float] = {}
        for item in ORDER:
            try:
                prices[item] = price_lookup.run_sync(f"Unit price of one {item}?").output
            except CatalogError as gap:
                # The planted mistake: ask for a guess instead of reporting the gap.
                prices[item] = price_lookup.run_sync(
                    f"The catalog says: {gap}. Estimate the unit price of one {item} in EUR.",
                    output_type=ToolOutput(estimate_price, name="estimate_price"),
                    model_settings=calling("estimate_price"),
                ).output
        order = ", ".join(
            f"{ORDER[item]} x {item} at {price:.2f} EUR" for item, price in prices.items()
        )
        total = calculator.run_sync(f"Order: {order}. Total with 20% VAT?").output
        answer = f"{total:.2f} EUR"
        message("Orchestrator", f"Final answer: {answer}")
        if answer == GROUND_TRUTH:
            current.succeed(answer)
        else:
            current.fail(f"answered {answer}, expected {GROUND_TRUTH}", final_answer=answer)
    return current


def main() -> int:
    provider = configure(service_name="shopping-team", project="examples")
    # pydantic-ai records its agent runs, model requests and tool calls into that provider.
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    finished = solve(chat_model())
    shutdown()  # sends the spans still queued before the program exits
    print(f"run {finished.run_id} finished: {finished.outcome}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
