"""CrewAI (a researcher with a census tool and a writer, two sequential tasks), traced by
openinference-instrumentation-crewai, in two environments (tests/frameworks/
environments.py): `crewai`, CrewAI's instrumentation alone, and `crewai+openai`, with the
OpenAI client's as well (CrewAI calls OpenAI-compatible models through the openai client,
not litellm). `FAULTFINDER_CONFORMANCE_FRAMEWORK` (set by noxfile.py) says which one runs.

CrewAI's instrumentation alone records no model call: an agent's answer is only the
output of its task span, and no step records the model asking for a tool before it ran
(the tool's own step carries its arguments).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from importlib.metadata import version

# CrewAI's own telemetry and trace upload, both to the internet: off before it loads.
# (Not OTEL_SDK_DISABLED, which would silence the spans under test as well.)
os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["CREWAI_DISABLE_TRACKING"] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"

import pytest
from crewai import LLM, Agent, Crew, Process, Task
from crewai.tools import BaseTool
from openinference.instrumentation.crewai import CrewAIInstrumentor

from tests.frameworks.environments import by_name
from tests.frameworks.harness import (
    Expected,
    Pipeline,
    check_attributions,
    check_understood,
)
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say
from tests.integration.sidecar import Sidecar

FRAMEWORK = os.environ.get("FAULTFINDER_CONFORMANCE_FRAMEWORK", "crewai")
WITH_MODEL_SPANS = FRAMEWORK == "crewai+openai"
PROJECT = "conformance-" + FRAMEWORK.replace("+", "-")
TASK = "What is the population of Lyon?"
WRITING = "Write one sentence about the population of Lyon."
CENSUS = "Lyon: 522,250 inhabitants (census 2021)"
CLAIM = "Lyon has 225,520 inhabitants."
NOTE = "Lyon, a city of 225,520 inhabitants, is France's third city."


def test_the_pinned_versions_are_installed() -> None:
    for package, pinned in by_name(FRAMEWORK).pinned.items():
        assert version(package) == pinned, package


@pytest.fixture(scope="module")
def pipeline(sidecar: Sidecar) -> Iterator[Pipeline]:
    pipeline = Pipeline(sidecar, PROJECT)
    CrewAIInstrumentor().instrument(tracer_provider=pipeline.provider)
    if WITH_MODEL_SPANS:
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=pipeline.provider)
    try:
        yield pipeline
    finally:
        if WITH_MODEL_SPANS:
            OpenAIInstrumentor().uninstrument()
        CrewAIInstrumentor().uninstrument()
        pipeline.shutdown()


class CensusDown(RuntimeError):
    """The census service did not answer."""


class CensusLookup(BaseTool):
    name: str = "census_lookup"
    description: str = "The population of a city from the national census."
    fails: bool = False

    def _run(self, city: str) -> str:
        if self.fails:
            raise CensusDown(f"census service timed out for {city}")
        return CENSUS


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


def script() -> dict[str, list]:
    return {
        # The planted flaw: the digits of the census figure, transposed.
        "RESEARCHER-ROLE": [call("census_lookup", city="Lyon"), say(CLAIM)],
        "WRITER-ROLE": [say(NOTE)],
    }


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before = pipeline.run_ids()
    with llm.running():
        answer, error = pipeline.invoke(lambda: crew(llm).kickoff())
    assert error is None, error
    assert "225,520" in str(answer)
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    expected = Expected(
        agents=["Researcher", "Writer"],
        task=TASK,
        # Without model spans no step reads `census_lookup(…)` before the tool ran.
        tools={"census_lookup": "Researcher"} if WITH_MODEL_SPANS else {},
        tool_results={"census_lookup": CENSUS},
        final_answer=NOTE,
    )
    check_understood(run, expected, project=PROJECT)
    steps = run["trajectory"]["steps"]
    census = [s for s in steps if s["kind"] == "tool" and s.get("tool_name") == "census_lookup"]
    assert [s["agent"] for s in census] == ["Researcher"], steps
    assert '"Lyon"' in (census[0].get("tool_arguments") or ""), census
    # The researcher's wrong claim is its own step, after the tool result it contradicts,
    # and the writer's note repeating it comes after that.
    claim = [s for s in steps if s["agent"] == "Researcher" and s["content"].strip() == CLAIM]
    assert claim and claim[0]["index"] > census[0]["index"], steps
    note = [s for s in steps if s["agent"] == "Writer" and s["content"].strip() == NOTE]
    assert note and note[0]["index"] > claim[0]["index"], steps
    pipeline.post_outcome(run["id"], outcome="failure", ground_truth="522,250")
    attributed = pipeline.the_run(before, statuses=("attributed",))
    check_attributions(attributed, ground_truth="522,250")


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": [fail(500)]})
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: crew(llm).kickoff())
    assert error is not None
    run = pipeline.the_run(before, statuses=("failed", "attributed"))
    assert run["agents"] == ["Researcher"], run["agents"]
    assert run["trajectory"]["task"] == TASK
    check_attributions(pipeline.the_run(before, statuses=("attributed",)), ground_truth=None)


def test_a_raising_tool_fed_back_and_answered_is_kept_as_evidence(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    before = pipeline.run_ids()
    with llm.running():
        _, error = pipeline.invoke(lambda: crew(llm, census_fails=True).kickoff())
    assert error is None  # CrewAI feeds the tool's error back to the model
    assert llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    failed = [s for s in run["trajectory"]["steps"] if s["status"] == "error"]
    assert [(s["agent"], s["tool_name"]) for s in failed] == [("Researcher", "census_lookup")]
    assert "census service timed out" in (failed[0]["error"] or "")
