"""OpenInference instrumentation against a real sidecar and a real local model: the `openai`
client traced by openinference-instrumentation-openai, inside agents and a tool traced by
openinference-instrumentation's own decorators, is assembled, graded and attributed.

Why this pair rather than smolagents: two agents written as plain functions keep the
number of model calls fixed (two) and the tiny test model on a forced tool call, so the
run has the same shape every time; the spans are still entirely OpenInference's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCall,
)
from openinference.instrumentation import TracerProvider
from openinference.instrumentation.openai import OpenAIInstrumentor
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource

from faultfinder import conventions as c
from faultfinder.attributors.local_server import (
    LocalModelServer,
)
from faultfinder.sdk import Client, configure, shutdown
from tests.integration.sidecar import Sidecar, quick_sidecar
from tests.llm_server import running_local_model

PROJECT = "openinference-interop"
QUESTION = "How many people live in Lyon?"
POPULATION_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "population_lookup",
        "description": "The population of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Lyon"]}},
            "required": ["city"],
        },
    },
}
CENSUS = {"Paris": 2_100_000}
"""The census service; it has no record for Lyon."""


@pytest.fixture(scope="module")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalModelServer]:
    with running_local_model("smollm2", tmp_path_factory.mktemp("llm")) as server:
        yield server


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    folder = tmp_path_factory.mktemp("openinference-sidecar")
    with quick_sidecar(folder, FAULTFINDER_ATTRIBUTORS="first_error") as running:
        yield running


@pytest.fixture
def provider(sidecar: Sidecar) -> Iterator[TracerProvider]:
    """OpenInference's tracer provider exporting to the sidecar, with the openai client traced."""
    oi_provider = TracerProvider(
        resource=Resource.create({c.SERVICE_NAME: "city-facts", c.PROJECT_NAME: PROJECT})
    )
    configure(sidecar.url, tracer_provider=oi_provider, batch=False, set_global=False)
    OpenAIInstrumentor().instrument(tracer_provider=oi_provider)
    try:
        yield oi_provider
    finally:
        OpenAIInstrumentor().uninstrument()
        shutdown()


def test_openinference_agents_are_assembled_graded_and_attributed(
    model_server: LocalModelServer, sidecar: Sidecar, provider: TracerProvider
) -> None:
    tracer = provider.get_tracer("city-facts")
    llm = openai.OpenAI(base_url=model_server.base_url, api_key="local")

    @tracer.tool(name="population_lookup")
    def population_lookup(city: str) -> int:
        if city not in CENSUS:
            raise KeyError(f"no census record for {city!r}")
        return CENSUS[city]

    @tracer.agent(name="Researcher")
    def researcher(question: str) -> str:
        response = llm.chat.completions.create(
            model="local",
            messages=[{"role": "user", "content": question}],
            tools=[POPULATION_TOOL],
            # llama.cpp's server honours only a named tool choice.
            tool_choice={"type": "function", "function": {"name": "population_lookup"}},
            max_tokens=24,
            temperature=0,
        )
        (call,) = response.choices[0].message.tool_calls or []
        assert isinstance(call, ChatCompletionMessageFunctionToolCall)
        try:
            return f"population: {population_lookup(**json.loads(call.function.arguments))}"
        except KeyError as missing:
            return f"lookup failed: {missing}"

    def writer(notes: str) -> str:
        # An agent span of one's own, named by the `agent.name` attribute.
        with tracer.start_as_current_span(
            "write answer",
            openinference_span_kind=OpenInferenceSpanKindValues.AGENT,
            attributes={SpanAttributes.AGENT_NAME: "Writer", SpanAttributes.INPUT_VALUE: notes},
        ) as span:
            response = llm.chat.completions.create(
                model="local",
                messages=[{"role": "user", "content": f"Notes: {notes}\n{QUESTION} One sentence."}],
                max_tokens=24,
                temperature=0,
            )
            answer = response.choices[0].message.content or ""
            span.set_attribute(SpanAttributes.OUTPUT_VALUE, answer)
            return answer

    run_ids: list[str] = []

    @tracer.chain(name="city report")
    def team(question: str) -> str:
        run_ids.append(format(trace.get_current_span().get_span_context().trace_id, "032x"))
        return writer(researcher(question))

    answer = team(QUESTION)
    provider.force_flush()
    (run_id,) = run_ids

    with Client(sidecar.url) as client:
        # The program cannot know the population; a grader marks the answer wrong afterwards.
        client.post_outcome(
            run_id,
            "failure",
            reason="the population of Lyon is about 520,000",
            ground_truth="about 520,000",
            final_answer=answer,
        )
        got = client.wait_for_run(run_id, "attributed", timeout=60, poll_interval=0.1)

    assert (got.project, got.outcome) == (PROJECT, "failure")
    trajectory = got.trajectory
    assert trajectory.task == QUESTION
    assert (trajectory.final_answer, trajectory.ground_truth) == (answer, "about 520,000")
    assert trajectory.agents == ("Researcher", "Writer")
    # The chain and both agent spans contain the LLM and tool spans: they are not steps.
    assert [(step.agent, step.kind) for step in trajectory.steps] == [
        ("Researcher", "llm"),
        ("Researcher", "tool"),
        ("Writer", "llm"),
    ]
    asked, looked_up, wrote = trajectory.steps
    assert asked.content.startswith("population_lookup(")
    assert asked.metadata["model"] == "local"
    assert asked.metadata["input_tokens"] > 0 and asked.metadata["output_tokens"] > 0
    assert (looked_up.tool_name, looked_up.status) == ("population_lookup", "error")
    assert "no census record" in (looked_up.error or "")
    # The call's arguments, not the tool's schema (OpenInference's `tool.parameters`).
    assert json.loads(looked_up.tool_arguments or "null") == {"city": "Lyon"}
    assert wrote.content == answer

    (attribution,) = got.attributions
    assert attribution.ok and attribution.method == "first_error"
    assert attribution.agent == "Researcher"
    assert attribution.step in (asked.index, looked_up.index)
