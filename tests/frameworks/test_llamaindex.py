"""LlamaIndex (an AgentWorkflow of two FunctionAgents, one with a function tool, handing
off to the other), with an OpenAI-compatible LLM, traced by
openinference-instrumentation-llama-index (`llamaindex`) or by Traceloop OpenLLMetry's
LlamaIndex and openai client instrumentations (`llamaindex+openllmetry`, as
`Traceloop.init()` sets them up). `FAULTFINDER_CONFORMANCE_FRAMEWORK` (set by
noxfile.py) says which one runs."""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.llms.openai_like import OpenAILike

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, Pipeline
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say

FRAMEWORK, PROJECT = harness.framework_under_test("llamaindex")

if FRAMEWORK == "llamaindex+openllmetry":
    # As Traceloop.init() sets it up: the framework's and the openai client's.
    from opentelemetry.instrumentation.llamaindex import (
        LlamaIndexInstrumentor as TraceloopLlamaIndex,
    )
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    pipeline = harness.pipeline_fixture(PROJECT, TraceloopLlamaIndex(), OpenAIInstrumentor())
else:
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    pipeline = harness.pipeline_fixture(PROJECT, LlamaIndexInstrumentor())


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
        return harness.census_answer(city, fails=census_fails)

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
        # The planted flaw: the writer misstates the figure.
        "WRITER-ROLE": [say(WRONG)],
    }


def test_a_wrong_claim_after_a_handoff_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    expected = harness.expected_census(
        agents=["researcher", "writer"],
        tools={"census_lookup": "researcher", "handoff": "researcher"},
    )
    graded = harness.graded_wrong_claim(pipeline, llm, lambda: ask(workflow(llm)), expected)
    assert graded.answer == WRONG
    steps = graded.steps
    assert [s["content"] for s in steps if s["agent"] == "writer"] == [WRONG], steps
    # The model calls are the steps; the helpers preparing them are not.
    llm_steps = [s for s in steps if s["kind"] == "llm"]
    assert len(llm_steps) == len(llm.served), llm_steps


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": [fail(500)]})
    before, _, error = pipeline.serving(llm, lambda: ask(workflow(llm)))
    assert error is not None
    if FRAMEWORK == "llamaindex+openllmetry":
        # OpenLLMetry records no error anywhere and never ends the workflow's span: the
        # spans that arrive (its tasks', all UNSET, none naming an agent) say their
        # parent is in their process. The run fails once `unfinished_after` passed
        # without its root; its only name for who acted is the service's.
        run = pipeline.the_run(before, statuses=("attributed",))
        assert run["unfinished"], run
        assert not harness.error_steps(run), run["trajectory"]["steps"]
        assert run["agents"] == [f"{PROJECT}-agents"], run["agents"]
        return
    run, _ = pipeline.the_failed_run(before, agents=["researcher"])
    assert not run["unfinished"], run


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before, answer, error = pipeline.serving(llm, lambda: ask(workflow(llm, census_fails=True)))
    assert error is None and answer == WRONG  # the workflow feeds the tool's error back
    run = pipeline.the_run(before, statuses=("complete",))
    assert sorted(run["agents"]) == ["researcher", "writer"], run["agents"]
    failed = harness.failed_tool_step(run, "researcher")
    assert TIMED_OUT in (failed["error"] or "")


def test_the_final_answer_is_the_writers_reply_not_the_stop_event(pipeline: Pipeline) -> None:
    # A reply whose newlines and quotes the stop event's repr escapes, long enough for the
    # instrumentation to cut the repr short.
    reply = (
        "Lyon's population, as the census reports it:\n"
        f'- "{WRONG}"\n'
        "- The figure is the commune's, not the metropolitan area's, which is larger.\n"
        "- Figures for the surrounding communes were not asked for and are left out."
    )
    llm = ScriptedOpenAI({**script(), "WRITER-ROLE": [say(reply)]})
    before, answer, error = pipeline.serving(llm, lambda: ask(workflow(llm)))
    assert error is None and answer == reply
    run = pipeline.the_run(before, statuses=("complete",))
    assert run["trajectory"]["final_answer"] == reply, run["trajectory"]["final_answer"]
