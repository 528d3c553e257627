"""No agent framework: a hand-written tool loop on the openai client, as many services run
their agent, with only the client instrumented: by OpenInference's
openinference-instrumentation-openai (`openai-client`, what Phoenix's set-up adds for an
OpenAI app), by Traceloop OpenLLMetry's opentelemetry-instrumentation-openai
(`openai-client+openllmetry`) or by OpenTelemetry's own
opentelemetry-instrumentation-openai-v2 (`openai-client+otel-genai`, its messages captured as
events: OTLP log records beside the spans). `FAULTFINDER_CONFORMANCE_FRAMEWORK` (set by noxfile.py)
says which one runs.

No span records the tool's execution (the loop calls a plain function): the sidecar knows
the call only from the model's reply asking for it, and its report only from the next
model call's input. No span names an agent: the agent is the service."""

from __future__ import annotations

import json
from typing import Any

from openai import OpenAI
from opentelemetry.trace import Tracer

from tests.frameworks import harness
from tests.frameworks.harness import TASK, TIMED_OUT, WRONG, Pipeline
from tests.frameworks.scripted_openai import ScriptedOpenAI, call, fail, say

FRAMEWORK, PROJECT = harness.framework_under_test("openai-client")

if FRAMEWORK == "openai-client+openllmetry":
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    pipeline = harness.pipeline_fixture(PROJECT, OpenAIInstrumentor())
elif FRAMEWORK == "openai-client+otel-genai":
    # OpenTelemetry's own GenAI instrumentation, its messages captured as events: one log
    # record per model call (`gen_ai.client.inference.operation.details`) naming its span,
    # the span itself without them.
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as OtelOpenAI

    pipeline = harness.pipeline_fixture(
        PROJECT,
        OtelOpenAI(),
        logs=True,
        env={"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "EVENT_ONLY"},
    )
else:
    from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInferenceOpenAI

    pipeline = harness.pipeline_fixture(PROJECT, OpenInferenceOpenAI())

AGENT = f"{PROJECT}-agents"
"""The service's name (`Pipeline`'s `service.name`): no span names an agent, so the
program that made the calls is the one agent known."""

CENSUS_TOOL = {
    "type": "function",
    "function": {
        "name": "census_lookup",
        "description": "The population of a city from the national census.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def answer(llm: ScriptedOpenAI, tracer: Tracer, *, census_fails: bool = False) -> str:
    """The service's agent: ask the model, run the tools it asks for, feed their reports
    (or their errors) back, until it answers."""
    client = OpenAI(base_url=llm.base_url, api_key="scripted", max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "RESEARCHER-ROLE: answer from the census only."},
        {"role": "user", "content": TASK},
    ]
    with tracer.start_as_current_span("answer"):
        while True:
            reply = (
                client.chat.completions.create(
                    model="scripted",
                    messages=messages,  # type: ignore[arg-type]
                    tools=[CENSUS_TOOL],  # type: ignore[list-item]
                )
                .choices[0]
                .message
            )
            if not reply.tool_calls:
                return reply.content or ""
            messages.append(reply.model_dump(exclude_none=True))
            for tool_call in reply.tool_calls:
                city = json.loads(tool_call.function.arguments)["city"]  # type: ignore[union-attr]
                try:
                    report = harness.census_answer(city, fails=census_fails)
                except Exception as error:  # fed back to the model, as loops do
                    report = f"census_lookup failed: {error}"
                messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": report})


def script() -> dict[str, list[Any]]:
    # The planted flaw: right after the census's figure, the model states another.
    return {"RESEARCHER-ROLE": [call("census_lookup", city="Lyon"), say(WRONG)]}


def test_a_wrong_claim_graded_afterwards(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    tracer = pipeline.provider.get_tracer("census-service")
    expected = harness.expected_census(agents=[AGENT], tools={"census_lookup": AGENT})
    graded = harness.graded_wrong_claim(pipeline, llm, lambda: answer(llm, tracer), expected)
    assert graded.answer == WRONG
    kinds = [(s["kind"], s.get("tool_name")) for s in graded.steps]
    assert kinds == [("llm", None), ("tool", "census_lookup"), ("llm", None)], kinds


def test_the_model_endpoint_failing_fails_the_run(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI({"RESEARCHER-ROLE": [fail(500)]})
    tracer = pipeline.provider.get_tracer("census-service")
    before, _, error = pipeline.serving(llm, lambda: answer(llm, tracer))
    assert error is not None
    pipeline.the_failed_run(before, agents=[AGENT])


def test_a_failing_tool_fed_back_is_kept_as_the_tools_report(pipeline: Pipeline) -> None:
    llm = ScriptedOpenAI(script())
    tracer = pipeline.provider.get_tracer("census-service")
    before, _, error = pipeline.serving(llm, lambda: answer(llm, tracer, census_fails=True))
    assert error is None and llm.remaining() == {}
    run = pipeline.the_run(before, statuses=("complete",))
    # Known only from the model's input: the error is the report, with no status.
    (report,) = [s for s in run["trajectory"]["steps"] if s["kind"] == "tool"]
    assert (report["agent"], report["tool_name"]) == (AGENT, "census_lookup"), report
    assert TIMED_OUT in report["content"], report
