"""A pydantic-ai team: a Researcher with the lookup tools delegates the computation to an
Analyst agent (a tool that runs it) with the calculator and the unit converter, traced by
pydantic-ai's own instrumentation.

    echo "What is the population of Varnholm?" | python pydantic_ai_team.py
"""

from __future__ import annotations

import os
import sys

from corpus_tools import (
    MAX_TOKENS,
    answer_line,
    calculate,
    city_facts,
    convert_units,
    country_facts,
    read_task,
    sales_total,
)
from corpus_tracing import tracer_provider
from openai import AsyncOpenAI
from pydantic_ai import Agent, InstrumentationSettings, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings

RESEARCHER = (
    "You are the Researcher. Look up the cities, countries or sales the question names "
    'with the tools, for example {"name": "city_facts", "arguments": {"city": '
    '"Varnholm, Kestrel Bay"}}. For arithmetic or a unit conversion, ask the Analyst. '
    "End with one line that holds only the answer."
)
ANALYST = (
    "You are the Analyst. Use a tool for the arithmetic or unit conversion asked. "
    "End with one line that holds only the result."
)


def team() -> Agent[None, str]:
    client = AsyncOpenAI(
        base_url=os.environ["OPENAI_BASE_URL"],
        api_key=os.environ.get("OPENAI_API_KEY", "none"),
        max_retries=0,
    )
    model = OpenAIChatModel(
        os.environ.get("FAULTFINDER_AGENT_MODEL", "local"),
        provider=OpenAIProvider(openai_client=client),
    )
    settings = ModelSettings(temperature=0, max_tokens=MAX_TOKENS)
    analyst = Agent(
        model,
        name="Analyst",
        instructions=ANALYST,
        tools=[calculate, convert_units],
        model_settings=settings,
    )
    researcher = Agent(
        model,
        name="Researcher",
        instructions=RESEARCHER,
        tools=[city_facts, country_facts, sales_total],
        model_settings=settings,
    )

    @researcher.tool
    async def ask_analyst(context: RunContext[object], request: str) -> str:
        """Ask the Analyst to compute something from the facts found.

        Args:
            request: the computation, with the numbers it needs
        """
        result = await analyst.run(request, usage=context.usage)
        return result.output

    return researcher


def main() -> int:
    task = read_task()
    provider = tracer_provider("corpus-pydantic-ai")
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    try:
        result = team().run_sync(task)
        print(answer_line(result.output))
    finally:
        provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
