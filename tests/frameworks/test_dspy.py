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
from collections.abc import Iterator
from importlib.metadata import version

# DSPy refreshes litellm's model price list from the internet unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "true")

import dspy
import pytest
from openinference.instrumentation.dspy import DSPyInstrumentor

from tests.frameworks.environments import by_name
from tests.frameworks.harness import (
    Expected,
    Pipeline,
    check_attributions,
    check_understood,
)
from tests.frameworks.scripted_openai import Reply, ScriptedOpenAI, fail, say
from tests.integration.sidecar import Sidecar

PROJECT = "conformance-dspy"
TASK = "What is the population of Lyon?"
CENSUS = "Lyon: 522,250 inhabitants (census 2021)"
AGENT = "ReAct"

# The ReAct step's system text lists its output fields; the final extraction's does not
# (it asks for `reasoning` and the signature's outputs instead).
REACT = "`next_tool_name`"
EXTRACT = "[[ ## reasoning ## ]]"


def test_the_pinned_versions_are_installed() -> None:
    for package, pinned in by_name("dspy").pinned.items():
        assert version(package) == pinned, package


@pytest.fixture(scope="module")
def pipeline(sidecar: Sidecar) -> Iterator[Pipeline]:
    pipeline = Pipeline(sidecar, PROJECT)
    DSPyInstrumentor().instrument(tracer_provider=pipeline.provider)
    try:
        yield pipeline
    finally:
        DSPyInstrumentor().uninstrument()
        pipeline.shutdown()


class CityQuestion(dspy.Signature):
    """Answer questions about cities from the national census."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


class CensusDown(RuntimeError):
    """The census service did not answer."""


def agent(llm: ScriptedOpenAI, *, census_fails: bool = False) -> dspy.ReAct:
    def census_lookup(city: str) -> str:
        """The population of a city from the national census."""
        if census_fails:
            raise CensusDown(f"census service timed out for {city}")
        return CENSUS

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
        # The planted flaw: the digits of the census figure, transposed.
        EXTRACT: [extract("The census gives the figure.", "Lyon has 225,520 inhabitants.")],
    }


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(looks_up_then_misstates())
    before = pipeline.run_ids()
    with llm.running():
        answer, error = pipeline.invoke(lambda: agent(llm)(question=TASK))
    assert error is None, error
    assert "225,520" in str(answer)
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    expected = Expected(
        agents=[AGENT],
        task=TASK,
        tools={"census_lookup": AGENT, "finish": AGENT},
        tool_results={"census_lookup": CENSUS},
        final_answer="Lyon has 225,520 inhabitants.",
    )
    check_understood(run, expected, project=PROJECT)
    steps = run["trajectory"]["steps"]
    # The model's replies read as thoughts, calls and fields, not as the adapter's markers.
    assert not any("[[ ##" in step["content"] for step in steps), steps
    claim = [s for s in steps if s["kind"] == "llm" and "225,520" in s["content"]]
    census = [s for s in steps if s.get("tool_name") == "census_lookup"]
    assert claim and census and census[0]["index"] < claim[0]["index"]
    pipeline.post_outcome(run["id"], outcome="failure", ground_truth="522,250")
    attributed = pipeline.the_run(before, statuses=("attributed",))
    check_attributions(attributed, ground_truth="522,250")


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({REACT: [fail(500)]})
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: agent(llm)(question=TASK))
    assert error is not None
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert run["agents"] == [AGENT], run["agents"]
    assert run["trajectory"]["task"] == TASK
    check_attributions(pipeline.the_run(before, statuses=("attributed",)), ground_truth=None)


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(looks_up_then_misstates())
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: agent(llm, census_fails=True)(question=TASK))
    assert error is None  # ReAct feeds the tool's error back as the observation
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert [(s["agent"], s["tool_name"]) for s in failed] == [(AGENT, "census_lookup")]
    assert "census service timed out" in (failed[0]["error"] or "")
