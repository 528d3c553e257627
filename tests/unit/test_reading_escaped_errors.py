"""A run an exception escaped: smolagents never ends its agents' spans then, so only their
steps' spans arrive. The agents are named from what those spans say, and the task is the
user's text, never a step's repr."""

from __future__ import annotations

import json

from opentelemetry import trace

from faultfinder import conventions as c
from faultfinder.attributors.model import StepKind, Trajectory
from faultfinder.reading.assembler import assemble_trajectory
from tests.otlp_helpers import MS, T0, SpanRecorder, span_records

SERVICE = "census-service"
TASK = "What is the population of Lyon?"
MANAGED_TASK = (
    "New task:\nYou're a helpful agent named 'census_agent'.\n"
    "You have been submitted this task by your manager.\n---\nTask:\nPopulation of Lyon\n---"
)


def _step(recorder: SpanRecorder, lost: trace.Span, number: int, start: int) -> trace.Span:
    """A smolagents step span (`Step N`) beneath an agent span that is never exported."""
    memory_step = f"ActionStep(step_number={number}, timing=Timing(start_time=1.0), error=None)"
    return recorder.span(
        f"Step {number}",
        parent=lost,
        start=start,
        end=start + 5 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_CHAIN,
            c.OI_INPUT_VALUE: json.dumps({"memory_step": memory_step}),
        },
    )


def _model_call(
    recorder: SpanRecorder, parent: trace.Span, start: int, user_text: str, calls: str
) -> None:
    recorder.span(
        "OpenAIModel.generate",
        parent=parent,
        start=start,
        end=start + MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_LLM,
            "llm.input_messages.0.message.role": "system",
            "llm.input_messages.0.message.content": "You are an expert assistant.",
            "llm.input_messages.1.message.role": "user",
            "llm.input_messages.1.message.content": user_text,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": calls,
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{}",
        },
    )


def _escaped_run() -> Trajectory:
    """A manager handing the task to its managed census agent, whose tool raised an
    exception that escaped both agents' runs: neither agent span ends."""
    recorder = SpanRecorder({"service.name": SERVICE})
    manager = recorder.tracer.start_span("manager.run", start_time=T0)  # never ended
    manager_step = _step(recorder, manager, 1, T0 + MS)
    _model_call(recorder, manager_step, T0 + MS, f"New task:\n{TASK}", "census_agent")
    census = recorder.tracer.start_span(  # never ended
        "census_agent.run",
        context=trace.set_span_in_context(manager_step),
        start_time=T0 + 2 * MS,
    )
    census_step = _step(recorder, census, 1, T0 + 2 * MS)
    _model_call(recorder, census_step, T0 + 2 * MS, MANAGED_TASK, "census_lookup")
    recorder.span(
        "SimpleTool",
        parent=census_step,
        start=T0 + 3 * MS,
        end=T0 + 4 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_TOOL,
            "tool.name": "census_lookup",
            c.OI_INPUT_VALUE: '{"kwargs": {"city": "Lyon"}}',
        },
    )
    return assemble_trajectory("r", span_records(recorder.spans))


def test_a_managed_agent_whose_span_never_arrived_is_named_by_its_task() -> None:
    trajectory = _escaped_run()
    steps = [(s.agent, s.kind, s.tool_name) for s in trajectory.steps]
    assert steps == [
        # Nothing that arrived names the manager: the program that sent the spans.
        (SERVICE, StepKind.LLM, None),
        ("census_agent", StepKind.LLM, None),
        ("census_agent", StepKind.TOOL, "census_lookup"),
    ]


def test_the_task_of_a_run_whose_agent_span_never_arrived_is_the_users_text() -> None:
    assert _escaped_run().task == TASK
