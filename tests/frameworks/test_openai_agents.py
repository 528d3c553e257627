"""The OpenAI Agents SDK (a triage agent handing off to a specialist that calls a function
tool), traced one of two ways: by OpenInference's openinference-instrumentation-openai-agents
(`openai-agents`), or by Traceloop OpenLLMetry's opentelemetry-instrumentation-openai-agents
(`openai-agents+openllmetry`). `FAULTFINDER_CONFORMANCE_FRAMEWORK` (set by noxfile.py)
says which one runs."""

from __future__ import annotations

from typing import Any

import agents
import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    Runner,
    function_tool,
)
from openai import AsyncOpenAI

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, Pipeline
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say

FRAMEWORK, PROJECT = harness.framework_under_test("openai-agents")

# Only the instrumentation's processor runs: the SDK's own one exports to OpenAI.
agents.set_trace_processors([])
if FRAMEWORK == "openai-agents+openllmetry":
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    # As `Traceloop.init()` sets it up: every installed library instrumented, the openai
    # client too. Without it no span holds what a chat-completions model answered:
    # OpenLLMetry's SDK instrumentation records a model's output for Responses API calls
    # only.
    pipeline = harness.pipeline_fixture(PROJECT, OpenAIAgentsInstrumentor(), OpenAIInstrumentor())
else:
    from openinference.instrumentation.openai_agents import (
        OpenAIAgentsInstrumentor as OpenInferenceAgentsInstrumentor,
    )

    pipeline = harness.pipeline_fixture(PROJECT, OpenInferenceAgentsInstrumentor())


def triage(llm: ScriptedOpenAI, *, census_fails: bool = False, escapes: bool = False) -> Agent:
    """The triage agent; `census_fails`: the census tool raises; `escapes`: its error is
    not fed back to the model but ends the run."""
    # No retries: a scripted 500 is the endpoint's one answer.
    client = AsyncOpenAI(base_url=llm.base_url, api_key="scripted", max_retries=0)
    model = OpenAIChatCompletionsModel(model="scripted", openai_client=client)

    def tell_the_model(context: RunContextWrapper[object], error: Exception) -> str:
        return f"census_lookup failed: {error}"

    # The SDK's default error function hides the error from the model and the trace.
    @function_tool(failure_error_function=None if escapes else tell_the_model)
    def census_lookup(city: str) -> str:
        """The population of a city from the national census.

        Args:
            city: the city's name
        """
        return harness.census_answer(city, fails=census_fails)

    census = Agent(
        name="census_agent",
        handoff_description="Looks up populations in the census.",
        instructions="CENSUS-ROLE: answer from the census only.",
        tools=[census_lookup],
        model=model,
    )
    return Agent(
        name="triage",
        instructions="TRIAGE-ROLE: hand population questions off.",
        handoffs=[census],
        model=model,
    )


def census_script() -> dict[str, list[Any]]:
    return {
        "TRIAGE-ROLE": [call("transfer_to_census_agent")],
        "CENSUS-ROLE": [
            call("census_lookup", city="Lyon"),
            # The planted flaw: the census agent misstates the figure.
            say(WRONG),
        ],
    }


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(census_script())
    expected = harness.expected_census(
        agents=["triage", "census_agent"], tools={"census_lookup": "census_agent"}
    )
    graded = harness.graded_wrong_claim(
        pipeline, llm, lambda: Runner.run_sync(triage(llm), TASK), expected
    )
    assert "225,520" in str(graded.answer.final_output)  # type: ignore[attr-defined]
    steps = graded.steps
    # The handoff is triage's step, and the wrong claim census_agent's last one.
    assert any(
        s["agent"] == "triage" and "transfer_to_census_agent(" in s["content"] for s in steps
    ), steps
    assert steps[-1]["agent"] == "census_agent" and "225,520" in steps[-1]["content"]


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"TRIAGE-ROLE": [fail(500)]})
    before, _, error = pipeline.serving(llm, lambda: Runner.run_sync(triage(llm), TASK))
    assert error is not None
    # The SDK's trace (the root) ends OK; the agent and its model call end in ERROR.
    pipeline.the_failed_run(before, agents=["triage"])


def test_a_raising_tool_that_ends_the_run_fails_it(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(harness.first_reply_only(census_script(), "CENSUS-ROLE"))
    before, _, error = pipeline.serving(
        llm, lambda: Runner.run_sync(triage(llm, census_fails=True, escapes=True), TASK)
    )
    assert error is not None and TIMED_OUT in str(error)
    run, attributed = pipeline.the_failed_run(before, agents=["census_agent", "triage"])
    harness.failed_tool_step(run, "census_agent")
    assert attributed["first_error"]["agent"] == "census_agent"


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(census_script())
    before, _, error = pipeline.serving(
        llm, lambda: Runner.run_sync(triage(llm, census_fails=True), TASK)
    )
    assert error is None  # the SDK feeds the tool's error back to the model
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    failed = harness.failed_tool_step(run, "census_agent")
    assert TIMED_OUT in (failed["error"] or "")


def shop_agent(llm: ScriptedOpenAI) -> Agent:
    """One agent with three record tools: a flight search returning the harness's `FLIGHTS`
    (a list of dicts), an order lookup returning its `ORDER` (items nested inside) and a
    stock report returning its `STOCK` (prose, a record a line).
    The SDK carries their return values as their str(), a Python literal, not JSON."""
    client = AsyncOpenAI(base_url=llm.base_url, api_key="scripted", max_retries=0)
    model = OpenAIChatCompletionsModel(model="scripted", openai_client=client)

    @function_tool
    def flight_search(origin: str, destination: str) -> list[dict[str, object]]:
        """Friday flights between two airports.

        Args:
            origin: the departure airport
            destination: the arrival airport
        """
        return harness.FLIGHTS

    @function_tool
    def order_details(order_id: str) -> dict[str, object]:
        """An order and its items.

        Args:
            order_id: the order's id
        """
        return harness.ORDER

    @function_tool
    def warehouse_stock(region: str) -> str:
        """The stock of a region's warehouses.

        Args:
            region: the region
        """
        return harness.STOCK

    return Agent(
        name="shop_agent",
        instructions=f"{harness.SHOP_ROLE}: answer from the tools.",
        tools=[flight_search, order_details, warehouse_stock],
        model=model,
    )


@pytest.mark.parametrize("scenario", harness.RECORD_SCENARIOS, ids=lambda s: s.name)
def test_what_a_tools_own_records_prove_wrong_is_blamed_with_them(
    pipeline: Pipeline, scenario: harness.RecordScenario
) -> None:
    llm = ScriptedOpenAI(scenario.script())
    harness.graded_record_claim(
        pipeline,
        llm,
        lambda: Runner.run_sync(shop_agent(llm), scenario.task),
        "shop_agent",
        scenario,
    )


def test_a_chat_of_two_turns_in_one_trace_shows_the_customers_reply(pipeline: Pipeline) -> None:
    """A customer chat traced as one run, as the SDK's `trace()` groups a conversation:
    the first `Runner.run` looks an order up and answers, the second gets the first's items
    and the customer's reply. That reply, which reaches the sidecar only inside the second
    model call's input, is a user step before that call; the tool's report and the agent's
    own answer, fed back in the same input, are not. Failed, the run is attributed as a
    conversation."""
    reply = "That chair is the wrong colour, please cancel it and keep the bottle."
    llm = ScriptedOpenAI(
        {
            harness.SHOP_ROLE: [
                call("order_details", order_id="#W2611340"),
                say("Your order #W2611340 holds a Water Bottle and an Office Chair."),
                say("Done: the Office Chair is cancelled, the Water Bottle stays."),
            ]
        }
    )

    def chat() -> None:
        agent = shop_agent(llm)
        with agents.trace("support chat"):
            first = Runner.run_sync(agent, "What is in my order #W2611340?")
            Runner.run_sync(agent, [*first.to_input_list(), {"role": "user", "content": reply}])

    before, _, error = pipeline.serving(llm, chat)
    assert error is None, error
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    steps = run["trajectory"]["steps"]
    shown = harness.show_trajectory(run["trajectory"])
    humans = [step for step in steps if step["kind"] == "human"]
    assert [(step["agent"], step["content"]) for step in humans] == [("user", reply)], shown
    (turn,) = humans
    later = steps[turn["index"] + 1 :]
    assert (
        later and later[0]["kind"] == "llm" and "Office Chair is cancelled" in later[-1]["content"]
    ), shown
    assert any(step["kind"] == "tool" for step in steps[: turn["index"]]), shown
    pipeline.post_outcome(run["id"], outcome="failure")
    attributed = pipeline.the_run(before, statuses=("attributed",))
    learned = next(a for a in attributed["attributions"] if a["method"] == "learned")
    assert learned["details"]["model_group"] == "conversation", learned["details"]
    assert learned["agent"] == "shop_agent", learned


def test_a_recorded_conversation_replays_as_the_live_run_its_labels_move_to(
    pipeline: Pipeline,
) -> None:
    """data/corpus/programs/openai_agents_chat_replay.py replays a labelled τ-bench
    conversation through this SDK (`data/conversations/replay_live.sh`); the labels
    then move from each recorded step to the live step the program says it became: the
    n-th model call to the n-th `llm` step, the n-th later customer turn to the n-th user
    step. Here that premise is checked on a real run: every model call is an `llm` step
    saying the recorded message or call, in order, every later customer turn a user step,
    every recorded tool report a tool step."""
    harness.replay_recorded_conversation(pipeline, "openai_agents_chat_replay", "tau-airline-0-t0")
