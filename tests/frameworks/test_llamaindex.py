"""LlamaIndex (an AgentWorkflow of two FunctionAgents, one with a function tool, handing
off to the other), with an OpenAI-compatible LLM, traced by
openinference-instrumentation-llama-index."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.llms.openai_like import OpenAILike
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

from tests.frameworks.harness import Expected, Pipeline, check_attributions, check_understood
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say
from tests.integration.sidecar import Sidecar

PROJECT = "conformance-llamaindex"
TASK = "What is the population of Lyon?"
CENSUS = "Lyon: 522,250 inhabitants (census 2021)"
WRONG = "Lyon has 225,520 inhabitants."
"""The planted flaw: the writer transposes the census figure's digits."""


@pytest.fixture(scope="module")
def pipeline(sidecar: Sidecar) -> Iterator[Pipeline]:
    pipeline = Pipeline(sidecar, PROJECT)
    LlamaIndexInstrumentor().instrument(tracer_provider=pipeline.provider)
    try:
        yield pipeline
    finally:
        LlamaIndexInstrumentor().uninstrument()
        pipeline.shutdown()


class CensusDown(RuntimeError):
    """The census service did not answer."""


def workflow(llm: ScriptedOpenAI, *, census_fails: bool = False) -> AgentWorkflow:
    model = OpenAILike(
        model="scripted",
        api_base=llm.base_url,
        api_key="x",
        is_chat_model=True,
        is_function_calling_model=True,
        max_retries=0,
    )

    def census_lookup(city: str) -> str:
        """The population of a city from the national census."""
        if census_fails:
            raise CensusDown(f"census service timed out for {city}")
        return CENSUS

    researcher = FunctionAgent(
        name="researcher",
        description="Looks figures up in the census.",
        system_prompt="RESEARCHER-ROLE: look figures up in the census, then hand off.",
        tools=[census_lookup],
        llm=model,
        can_handoff_to=["writer"],
    )
    writer = FunctionAgent(
        name="writer",
        description="Writes the answer for the reader.",
        system_prompt="WRITER-ROLE: write the answer for the reader.",
        tools=[],
        llm=model,
    )
    return AgentWorkflow(agents=[researcher, writer], root_agent="researcher")


def ask(flow: AgentWorkflow) -> str:
    async def run() -> Any:
        return await flow.run(user_msg=TASK)

    return str(asyncio.run(run()))


def script() -> dict[str, list[Any]]:
    return {
        "RESEARCHER-ROLE": [
            call("census_lookup", city="Lyon"),
            call("handoff", to_agent="writer", reason="The census figure is in."),
        ],
        "WRITER-ROLE": [say(WRONG)],
    }


def test_a_wrong_claim_after_a_handoff_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before = pipeline.run_ids()
    with llm.running():
        answer, error = pipeline.invoke(lambda: ask(workflow(llm)))
    assert error is None and answer == WRONG
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    expected = Expected(
        agents=["researcher", "writer"],
        task=TASK,
        tools={"census_lookup": "researcher", "handoff": "researcher"},
        tool_results={"census_lookup": CENSUS},
        final_answer="225,520",
    )
    check_understood(run, expected, project=PROJECT)
    steps = run["trajectory"]["steps"]
    assert [s["content"] for s in steps if s["agent"] == "writer"] == [WRONG], steps
    # The model calls are the steps; the helpers preparing them are not.
    llm_steps = [s for s in steps if s["kind"] == "llm"]
    assert len(llm_steps) == len(llm.served), llm_steps
    pipeline.post_outcome(run["id"], outcome="failure", ground_truth="522,250")
    attributed = pipeline.the_run(before, statuses=("attributed",))
    check_attributions(attributed, ground_truth="522,250")


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": [fail(500)]})
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: ask(workflow(llm)))
    assert error is not None
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert run["agents"] == ["researcher"], run["agents"]
    check_attributions(pipeline.the_run(before, statuses=("attributed",)), ground_truth=None)


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before = pipeline.run_ids()
    with llm.running():
        answer, error = pipeline.invoke(lambda: ask(workflow(llm, census_fails=True)))
    assert error is None and answer == WRONG  # the workflow feeds the tool's error back
    run = pipeline.the_run(before, statuses=("complete",))
    assert sorted(run["agents"]) == ["researcher", "writer"], run["agents"]
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert [(s["agent"], s["tool_name"]) for s in failed] == [("researcher", "census_lookup")]
    assert "census service timed out" in (failed[0]["error"] or "")
