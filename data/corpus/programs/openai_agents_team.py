"""An OpenAI Agents SDK team: a Researcher with the lookup tools hands off to an Analyst
with the calculator and the unit converter (chat-completions model), traced by
openinference-instrumentation-openai-agents.

    echo "What is the population of Varnholm?" | python openai_agents_team.py
"""

from __future__ import annotations

import os
import sys

import agents
from agents import (
    Agent,
    HandoffInputData,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    handoff,
)
from agents.items import ToolCallOutputItem
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
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

RESEARCHER = (
    "You are the Researcher. Look up the cities, countries or sales the question names "
    'with the tools, for example {"name": "city_facts", "arguments": {"city": '
    '"Varnholm, Kestrel Bay"}}. Then hand off to the Analyst.'
)
ANALYST = (
    "You are the Analyst. Answer the question from the Researcher's facts. "
    "Use a tool for any arithmetic or unit conversion. "
    "End with one line that holds only the answer."
)


def brief(data: HandoffInputData) -> HandoffInputData:
    """What the Analyst is handed: the question and what the Researcher's tools
    returned, as one user turn (the model answers a user turn; after a bare handoff
    result it echoes the handoff call)."""
    history = data.input_history
    if isinstance(history, str):
        question = history
    else:
        asked = [item for item in history if isinstance(item, dict) and item.get("role") == "user"]
        question = str(asked[0].get("content", "")) if asked else ""
    found = [
        str(item.output)
        for item in (*data.pre_handoff_items, *data.new_items)
        if isinstance(item, ToolCallOutputItem)
    ]
    text = f"Question: {question}\nThe Researcher found: {'; '.join(found) or 'nothing'}"
    return data.clone(input_history=text, pre_handoff_items=(), new_items=())


def team() -> Agent:
    client = AsyncOpenAI(
        base_url=os.environ["OPENAI_BASE_URL"],
        api_key=os.environ.get("OPENAI_API_KEY", "none"),
        max_retries=0,
    )
    model = OpenAIChatCompletionsModel(
        model=os.environ.get("FAULTFINDER_AGENT_MODEL", "local"), openai_client=client
    )
    settings = ModelSettings(temperature=0, max_tokens=MAX_TOKENS)
    analyst = Agent(
        name="Analyst",
        handoff_description="Computes the answer from the facts.",
        instructions=ANALYST,
        tools=[function_tool(calculate), function_tool(convert_units)],
        model=model,
        model_settings=settings,
    )
    return Agent(
        name="Researcher",
        instructions=RESEARCHER,
        tools=[
            function_tool(city_facts),
            function_tool(country_facts),
            function_tool(sales_total),
        ],
        handoffs=[handoff(analyst, input_filter=brief)],
        model=model,
        model_settings=settings,
    )


def main() -> int:
    task = read_task()
    # The SDK's own trace processor exports to OpenAI's platform: only OpenInference's runs.
    agents.set_trace_processors([])
    provider = tracer_provider("corpus-openai-agents")
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    try:
        result = Runner.run_sync(team(), task, max_turns=10)
        print(answer_line(str(result.final_output)))
    finally:
        provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
