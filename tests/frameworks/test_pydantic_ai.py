"""pydantic-ai (an orchestrator whose tool delegates to a second agent that calls a
function tool), traced by pydantic-ai's own instrumentation (`Agent.instrument_all`)."""

from __future__ import annotations

from typing import Any

import pytest
from openai import AsyncOpenAI
from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent, InstrumentationSettings, ModelRetry, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, CensusDown, Pipeline
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say

PROJECT = "conformance-pydantic-ai"


class PydanticAIInstrumentation:
    """pydantic-ai's own instrumentation (`Agent.instrument_all`) as an instrumentor."""

    def instrument(self, *, tracer_provider: TracerProvider, **_: Any) -> None:
        Agent.instrument_all(InstrumentationSettings(tracer_provider=tracer_provider))

    def uninstrument(self) -> None:
        Agent.instrument_all(False)


pipeline = harness.pipeline_fixture(PROJECT, PydanticAIInstrumentation())


def orchestrator(
    llm: ScriptedOpenAI, *, census_fails: bool = False, retry: bool = False
) -> Agent[None, str]:
    """The orchestrator; `census_fails`: the census tool raises; `retry`: it asks the model
    to try again (`ModelRetry`, fed back) instead of ending the run."""
    # No retries: a scripted 500 is the endpoint's one answer.
    client = AsyncOpenAI(base_url=llm.base_url, api_key="scripted", max_retries=0)
    model = OpenAIChatModel("scripted", provider=OpenAIProvider(openai_client=client))
    census = Agent(
        model,
        name="census_agent",
        instructions="CENSUS-ROLE: answer from the census only.",
        output_type=str,
    )

    @census.tool_plain
    def census_lookup(city: str) -> str:
        """The population of a city from the national census."""
        if census_fails and retry:
            raise ModelRetry(f"{TIMED_OUT} for {city}")
        return harness.census_answer(city, fails=census_fails)

    lead: Agent[None, str] = Agent(
        model,
        name="orchestrator",
        instructions="ORCHESTRATOR-ROLE: delegate population questions to the census agent.",
        output_type=str,
    )

    @lead.tool
    async def ask_census_agent(context: RunContext[None], question: str) -> str:
        """Ask the census agent a population question."""
        result = await census.run(question, usage=context.usage)
        return result.output

    return lead


def census_script() -> dict[str, list[Any]]:
    return {
        "ORCHESTRATOR-ROLE": [
            call("ask_census_agent", question="Population of Lyon from the census"),
            say(WRONG),
        ],
        "CENSUS-ROLE": [
            call("census_lookup", city="Lyon"),
            # The planted flaw: the census agent misstates the figure.
            say(WRONG),
        ],
    }


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(census_script())
    expected = harness.expected_census(
        agents=["orchestrator", "census_agent"],
        # The delegating tool holds the census agent's run: a container, not a step.
        tools={"census_lookup": "census_agent"},
    )
    graded = harness.graded_wrong_claim(
        pipeline, llm, lambda: orchestrator(llm).run_sync(TASK), expected
    )
    assert "225,520" in graded.answer.output  # type: ignore[attr-defined]
    steps = graded.steps
    assert "ask_census_agent" not in graded.run["agents"]
    assert steps[0]["agent"] == "orchestrator" and "ask_census_agent(" in steps[0]["content"]
    # The wrong claim is the census agent's, right after its tool's result.
    (lookup,) = [s for s in steps if s.get("tool_name") == "census_lookup"]
    claim = steps[lookup["index"] + 1]
    assert claim["agent"] == "census_agent" and "225,520" in claim["content"], claim


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"ORCHESTRATOR-ROLE": [fail(500)]})
    before, _, error = pipeline.serving(llm, lambda: orchestrator(llm).run_sync(TASK))
    assert error is not None
    pipeline.the_failed_run(before, agents=["orchestrator"])


def test_a_raising_tool_that_ends_the_run_fails_it(pipeline: Pipeline) -> None:
    script = harness.first_reply_only(census_script(), "ORCHESTRATOR-ROLE", "CENSUS-ROLE")
    llm = ScriptedOpenAI(script)
    before, _, error = pipeline.serving(
        llm, lambda: orchestrator(llm, census_fails=True).run_sync(TASK)
    )
    assert isinstance(error, CensusDown), error
    run, attributed = pipeline.the_failed_run(before, agents=["census_agent", "orchestrator"])
    failed = [(s["agent"], s["tool_name"]) for s in harness.error_steps(run)]
    assert ("census_agent", "census_lookup") in failed, failed
    assert attributed["first_error"]["agent"] == "census_agent"


def test_a_tool_asking_the_model_to_retry_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(census_script())
    before, _, error = pipeline.serving(
        llm, lambda: orchestrator(llm, census_fails=True, retry=True).run_sync(TASK)
    )
    # The census tool's error goes back to the model, which answers all the same.
    assert error is None, error
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    lookups = [s for s in run["trajectory"]["steps"] if s.get("tool_name") == "census_lookup"]
    assert {s["agent"] for s in lookups} == {"census_agent"}
    assert any(TIMED_OUT in (s["content"] + (s["error"] or "")) for s in lookups)
    assert "225,520" in (run["trajectory"]["final_answer"] or "")


def shop_agent(llm: ScriptedOpenAI) -> Agent[None, str]:
    """One agent with three record tools: a flight search returning the harness's `FLIGHTS`
    (a list of dicts), an order lookup returning its `ORDER` (items nested inside) and a
    stock report returning its `STOCK` (prose, a record a line).
    pydantic-ai carries their return values as JSON."""
    client = AsyncOpenAI(base_url=llm.base_url, api_key="scripted", max_retries=0)
    model = OpenAIChatModel("scripted", provider=OpenAIProvider(openai_client=client))
    shop = Agent(
        model,
        name="shop_agent",
        instructions=f"{harness.SHOP_ROLE}: answer from the tools.",
        output_type=str,
    )

    @shop.tool_plain
    def flight_search(origin: str, destination: str) -> list[dict[str, object]]:
        """Friday flights between two airports."""
        return harness.FLIGHTS

    @shop.tool_plain
    def order_details(order_id: str) -> dict[str, object]:
        """An order and its items."""
        return harness.ORDER

    @shop.tool_plain
    def warehouse_stock(region: str) -> str:
        """The stock of a region's warehouses."""
        return harness.STOCK

    return shop


@pytest.mark.parametrize("scenario", harness.RECORD_SCENARIOS, ids=lambda s: s.name)
def test_what_a_tools_own_records_prove_wrong_is_blamed_with_them(
    pipeline: Pipeline, scenario: harness.RecordScenario
) -> None:
    llm = ScriptedOpenAI(scenario.script())
    harness.graded_record_claim(
        pipeline, llm, lambda: shop_agent(llm).run_sync(scenario.task), "shop_agent", scenario
    )


def test_a_recorded_conversation_replays_as_the_live_run_its_labels_move_to(
    pipeline: Pipeline,
) -> None:
    """data/corpus/programs/pydantic_ai_chat_replay.py replays a labelled τ-bench
    conversation through pydantic-ai (`FRAMEWORK=pydantic-ai
    data/conversations/replay_live.sh`): one `Agent.run` per customer turn, given the
    messages so far, under one span of the service's own. The labels then move from each
    recorded step to the live step the program says it became: the n-th model call to the
    n-th `llm` step, the n-th later customer turn to the n-th user step. Here that premise is
    checked on a real run, and with it that a pydantic-ai chat reads as a conversation: the
    customer's later turns, which reach the sidecar only inside the model calls' inputs, are
    user steps."""
    harness.replay_recorded_conversation(pipeline, "pydantic_ai_chat_replay", "tau-airline-0-t0")
