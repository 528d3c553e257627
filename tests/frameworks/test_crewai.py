"""CrewAI (a researcher with a census tool and a writer, two sequential tasks), traced by
openinference-instrumentation-crewai, in two environments (tests/frameworks/
environments.py): `crewai`, CrewAI's instrumentation alone, and `crewai+openai`, with the
OpenAI client's as well (CrewAI calls OpenAI-compatible models through the openai client,
not litellm); and by Traceloop OpenLLMetry's CrewAI and openai client instrumentations
(`crewai+openllmetry`, as `Traceloop.init()` sets them up), which record no tool span: the
tool calls are read from the model calls' inputs. `FAULTFINDER_CONFORMANCE_FRAMEWORK`
(set by noxfile.py) says which one runs.

CrewAI's instrumentation alone records no model call: an agent's answer is only the
output of its task span, and no step records the model asking for a tool before it ran
(the tool's own step carries its arguments).
"""

from __future__ import annotations

import os
from typing import Any

# CrewAI's own telemetry and trace upload, both to the internet: off before it loads.
# (Not OTEL_SDK_DISABLED, which would silence the spans under test as well.)
os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["CREWAI_DISABLE_TRACKING"] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"

from crewai import LLM, Agent, Crew, Process, Task
from crewai.tools import BaseTool

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, Instrumentor, Pipeline
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say

FRAMEWORK, PROJECT = harness.framework_under_test("crewai")
WITH_MODEL_SPANS = FRAMEWORK in ("crewai+openai", "crewai+openllmetry")
WRITING = "Write one sentence about the population of Lyon."
NOTE = "Lyon, a city of 225,520 inhabitants, is France's third city."

INSTRUMENTORS: list[Instrumentor] = []
if FRAMEWORK == "crewai+openllmetry":
    # As Traceloop.init() sets it up: CrewAI's and the openai client's.
    from opentelemetry.instrumentation.crewai import CrewAIInstrumentor as CrewAITraceloop
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor as OpenAITraceloop

    INSTRUMENTORS += [CrewAITraceloop(), OpenAITraceloop()]
else:
    from openinference.instrumentation.crewai import CrewAIInstrumentor

    INSTRUMENTORS.append(CrewAIInstrumentor())
    if WITH_MODEL_SPANS:
        from openinference.instrumentation.openai import OpenAIInstrumentor

        INSTRUMENTORS.append(OpenAIInstrumentor())
pipeline = harness.pipeline_fixture(PROJECT, *INSTRUMENTORS)


class CensusLookup(BaseTool):
    name: str = "census_lookup"
    description: str = "The population of a city from the national census."
    fails: bool = False

    def _run(self, city: str) -> str:
        return harness.census_answer(city, fails=self.fails)


def crew(llm: ScriptedOpenAI, *, census_fails: bool = False) -> Crew:
    model = LLM(model="openai/scripted", base_url=llm.base_url, api_key="x")
    researcher = Agent(
        role="Researcher",
        goal="Find city populations",
        backstory="RESEARCHER-ROLE: you answer from the census only.",
        tools=[CensusLookup(fails=census_fails)],
        llm=model,
        allow_delegation=False,
        max_iter=3,
        # A failed model call is the task's end, not a retry of the whole task.
        max_retry_limit=0,
    )
    writer = Agent(
        role="Writer",
        goal="Write short notes",
        backstory="WRITER-ROLE: you write one-sentence notes.",
        llm=model,
        allow_delegation=False,
        max_iter=2,
        max_retry_limit=0,
    )
    research = Task(description=TASK, expected_output="The population figure", agent=researcher)
    note = Task(description=WRITING, expected_output="One sentence", agent=writer)
    return Crew(agents=[researcher, writer], tasks=[research, note], process=Process.sequential)


def script() -> dict[str, list[Any]]:
    return {
        # The planted flaw: the researcher misstates the figure, the writer repeats it.
        "RESEARCHER-ROLE": [call("census_lookup", city="Lyon"), say(WRONG)],
        "WRITER-ROLE": [say(NOTE)],
    }


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    expected = harness.expected_census(
        agents=["Researcher", "Writer"],
        # Without model spans no step reads `census_lookup(…)` before the tool ran.
        tools={"census_lookup": "Researcher"} if WITH_MODEL_SPANS else {},
        final_answer=NOTE,
    )
    graded = harness.graded_wrong_claim(pipeline, llm, lambda: crew(llm).kickoff(), expected)
    assert "225,520" in str(graded.answer)
    steps = graded.steps
    census = [s for s in steps if s["kind"] == "tool" and s.get("tool_name") == "census_lookup"]
    assert [s["agent"] for s in census] == ["Researcher"], steps
    assert '"Lyon"' in (census[0].get("tool_arguments") or ""), census
    # The researcher's wrong claim is its own step, after the tool result it contradicts,
    # and the writer's note repeating it comes after that.
    claim = [s for s in steps if s["agent"] == "Researcher" and s["content"].strip() == WRONG]
    assert claim and claim[0]["index"] > census[0]["index"], steps
    note = [s for s in steps if s["agent"] == "Writer" and s["content"].strip() == NOTE]
    assert note and note[0]["index"] > claim[0]["index"], steps


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": [fail(500)]})
    before, _, error = pipeline.serving(llm, lambda: crew(llm).kickoff())
    assert error is not None
    run, _ = pipeline.the_failed_run(before, agents=["Researcher"])
    assert run["trajectory"]["task"] == TASK


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before, _, error = pipeline.serving(llm, lambda: crew(llm, census_fails=True).kickoff())
    assert error is None  # CrewAI feeds the tool's error back to the model
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    if FRAMEWORK == "crewai+openllmetry":
        # OpenLLMetry records no tool span: the call is known only from the model's input,
        # where the error is the tool's report, with no status to say it failed.
        (call,) = [s for s in run["trajectory"]["steps"] if s["kind"] == "tool"]
        assert (call["agent"], call["tool_name"]) == ("Researcher", "census_lookup"), call
        assert TIMED_OUT in call["content"] and call["status"] == "unset", call
        return
    failed = harness.failed_tool_step(run, "Researcher")
    assert TIMED_OUT in (failed["error"] or "")
