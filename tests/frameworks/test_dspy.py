"""DSPy (a `dspy.ReAct` agent with a census tool), traced by
openinference-instrumentation-dspy. DSPy's instrumentation traces the LM calls itself
(`LM.__call__`), so no LLM-client instrumentation is installed beside it.

ReAct parses its fields out of the model's text (the ChatAdapter's `[[ ## field ## ]]`
sections): the scripted replies are written in that format. Its one agent is the ReAct
module, which DSPy's spans name `ReAct.forward`.
"""

from __future__ import annotations

import json
import os

# DSPy refreshes litellm's model price list from the internet unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "true")

import dspy
from openinference.instrumentation.dspy import DSPyInstrumentor

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, Pipeline
from tests.frameworks.scripted_openai import Reply, ScriptedOpenAI, fail, say

PROJECT = "conformance-dspy"
AGENT = "ReAct"

# The ReAct step's system text lists its output fields; the final extraction's does not
# (it asks for `reasoning` and the signature's outputs instead).
REACT = "`next_tool_name`"
EXTRACT = "[[ ## reasoning ## ]]"

pipeline = harness.pipeline_fixture(PROJECT, DSPyInstrumentor())


class CityQuestion(dspy.Signature):
    """Answer questions about cities from the national census."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


def agent(llm: ScriptedOpenAI, *, census_fails: bool = False) -> dspy.ReAct:
    def census_lookup(city: str) -> str:
        """The population of a city from the national census."""
        return harness.census_answer(city, fails=census_fails)

    # No retries and no cache: a scripted 500 is the endpoint's one answer, and every
    # call reaches the endpoint.
    lm = dspy.LM("openai/scripted", api_base=llm.base_url, api_key="x", cache=False, num_retries=0)
    dspy.configure(lm=lm, adapter=dspy.ChatAdapter())
    return dspy.ReAct(CityQuestion, tools=[census_lookup], max_iters=3)


def react(thought: str, tool: str, **arguments: object) -> Reply:
    """A ReAct turn as the ChatAdapter parses it."""
    return say(
        f"[[ ## next_thought ## ]]\n{thought}\n\n"
        f"[[ ## next_tool_name ## ]]\n{tool}\n\n"
        f"[[ ## next_tool_args ## ]]\n{json.dumps(arguments)}\n\n"
        "[[ ## completed ## ]]"
    )


def extract(reasoning: str, answer: str) -> Reply:
    return say(
        f"[[ ## reasoning ## ]]\n{reasoning}\n\n"
        f"[[ ## answer ## ]]\n{answer}\n\n"
        "[[ ## completed ## ]]"
    )


def looks_up_then_misstates() -> dict[str, list[Reply]]:
    return {
        REACT: [
            react("The census has the figure.", "census_lookup", city="Lyon"),
            react("I have the figure.", "finish"),
        ],
        # The planted flaw: the extraction misstates the figure.
        EXTRACT: [extract("The census gives the figure.", WRONG)],
    }


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(looks_up_then_misstates())
    expected = harness.expected_census(
        agents=[AGENT], tools={"census_lookup": AGENT, "finish": AGENT}, final_answer=WRONG
    )
    graded = harness.graded_wrong_claim(pipeline, llm, lambda: agent(llm)(question=TASK), expected)
    assert "225,520" in str(graded.answer)
    steps = graded.steps
    # The model's replies read as thoughts, calls and fields, not as the adapter's markers.
    assert not any("[[ ##" in step["content"] for step in steps), steps
    claim = [s for s in steps if s["kind"] == "llm" and "225,520" in s["content"]]
    census = [s for s in steps if s.get("tool_name") == "census_lookup"]
    assert claim and census and census[0]["index"] < claim[0]["index"]


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({REACT: [fail(500)]})
    before, _, error = pipeline.serving(llm, lambda: agent(llm)(question=TASK))
    assert error is not None
    run, _ = pipeline.the_failed_run(before, agents=[AGENT])
    assert run["trajectory"]["task"] == TASK


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(looks_up_then_misstates())
    before, _, error = pipeline.serving(llm, lambda: agent(llm, census_fails=True)(question=TASK))
    assert error is None  # ReAct feeds the tool's error back as the observation
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    failed = harness.failed_tool_step(run, AGENT)
    assert TIMED_OUT in (failed["error"] or "")
