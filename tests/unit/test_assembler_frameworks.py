"""Which spans are steps in the shapes frameworks record: agents named by their method,
tools recorded twice or around other work, agent turns without model spans, event spans."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from faultfinder import conventions as c
from faultfinder.attributors.model import StepKind, StepStatus
from faultfinder.reading.assembler import assemble_trajectory
from faultfinder.reading.model import SpanRecord
from tests.otlp_helpers import (
    MS,
    T0,
    SpanRecorder,
    span_records,
)


def test_an_agent_span_named_after_its_method_names_the_agent() -> None:
    # smolagents: AGENT spans are named `<agent>.run` and carry no `agent.name`.
    recorder = SpanRecorder()
    manager = recorder.span(
        "manager.run",
        start=T0,
        end=T0 + 10 * MS,
        attributes={
            "openinference.span.kind": "AGENT",
            "input.value": '{"task": "Lyon?", "stream": false}',
        },
    )
    recorder.span(
        "OpenAIModel.generate",
        parent=manager,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={"openinference.span.kind": "LLM", "output.value": "census_agent(...)"},
    )
    census = recorder.span(
        "census_agent.run",
        parent=manager,
        start=T0 + 3 * MS,
        end=T0 + 6 * MS,
        attributes={"openinference.span.kind": "AGENT"},
    )
    recorder.span(
        "census_lookup",
        parent=census,
        start=T0 + 4 * MS,
        end=T0 + 5 * MS,
        attributes={"openinference.span.kind": "TOOL", "tool.name": "census_lookup"},
    )
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert [s.agent for s in result.steps] == ["manager", "census_agent"]
    # The root's input is the run's call arguments as JSON: the task is the user's text.
    assert result.task == "Lyon?"


def tool_recorded_twice_spans(*, fails: bool) -> tuple[ReadableSpan, ...]:
    """One tool call as AutoGen AgentChat records it with the global tracer provider set:
    the OpenInference TOOL span (arguments, result, status OK even when the tool raised)
    around autogen-core's GenAI `execute_tool` span (no content; the error, if any)."""
    recorder = SpanRecorder()
    agent = recorder.span(
        "researcher.on_messages_stream",
        start=T0,
        end=T0 + 10 * MS,
        attributes={"openinference.span.kind": "AGENT", "graph.node.id": "researcher"},
    )
    outer = recorder.span(
        "researcher.census_lookup",
        parent=agent,
        start=T0 + MS,
        end=T0 + 4 * MS,
        attributes={
            "openinference.span.kind": "TOOL",
            "tool.name": "census_lookup",
            "input.value": '{"city": "Lyon"}',
            "output.value": "census timed out" if fails else "Lyon: 522,250",
        },
    )
    recorder.span(
        "execute_tool census_lookup",
        parent=outer,
        start=T0 + 2 * MS,
        end=T0 + 3 * MS,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
            c.GEN_AI_TOOL_NAME: "census_lookup",
        },
        error="census timed out" if fails else None,
    )
    return recorder.spans


@pytest.mark.parametrize("fails", [False, True])
def test_a_tool_call_recorded_by_two_instrumentations_is_one_step(fails: bool) -> None:
    result = assemble_trajectory("r", span_records(tool_recorded_twice_spans(fails=fails)))
    (step,) = result.steps
    assert (step.agent, step.kind, step.tool_name) == ("researcher", StepKind.TOOL, "census_lookup")
    assert step.metadata["span_name"] == "researcher.census_lookup"
    assert step.tool_arguments == '{"city": "Lyon"}'
    if fails:
        # The error only the inner record saw is the step's.
        assert step.status is StepStatus.ERROR and step.error == "census timed out"
        assert step.content == "census timed out"
    else:
        assert step.status is not StepStatus.ERROR
        assert step.content == step.tool_result == "Lyon: 522,250"


def test_a_tool_span_around_other_work_stays_a_container() -> None:
    recorder = SpanRecorder()
    delegate = recorder.span(
        "execute_tool task_researcher",
        start=T0,
        end=T0 + 10 * MS,
        attributes={c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "delegate"},
    )
    recorder.span(
        "execute_tool census_lookup",
        parent=delegate,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "census"},
    )
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert [s.tool_name for s in result.steps] == ["census"]


def _crew_without_model_spans(tasks_attribute: str = c.CREWAI_CREW_TASKS) -> list[SpanRecord]:
    """CrewAI traced by its own instrumentation alone: task spans (AGENT) around tool spans,
    no LLM span anywhere; the crew's tasks listed under `tasks_attribute`."""
    recorder = SpanRecorder()
    tasks = json.dumps(
        [
            {"description": "What is the population of Lyon?", "agent_role": "Researcher"},
            {"description": "Write one sentence.", "agent_role": "Writer"},
        ]
    )
    crew = recorder.tracer.start_span(
        "Crew_1.kickoff",
        start_time=T0,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "CHAIN",
            tasks_attribute: tasks,
            c.OI_OUTPUT_VALUE: json.dumps({"raw": "Lyon, a city of 225,520.", "tasks_output": []}),
        },
    )
    researcher = recorder.tracer.start_span(
        "Researcher._execute_core",
        context=trace.set_span_in_context(crew),
        start_time=T0 + MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "AGENT",
            c.OI_GRAPH_NODE_ID: "Researcher",
            c.OI_INPUT_VALUE: json.dumps({"agent": {"role": "Researcher"}, "context": ""}),
            c.OI_OUTPUT_VALUE: json.dumps({"raw": "Lyon has 225,520 inhabitants."}),
        },
    )
    recorder.span(
        "census_lookup.run",
        parent=researcher,
        start=T0 + 2 * MS,
        end=T0 + 3 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "TOOL",
            c.OI_TOOL_NAME: "census_lookup",
            c.OI_INPUT_VALUE: '{"city": "Lyon"}',
            c.OI_OUTPUT_VALUE: "Lyon: 522,250 inhabitants",
        },
    )
    researcher.end(end_time=T0 + 4 * MS)
    recorder.span(
        "Writer._execute_core",
        parent=crew,
        start=T0 + 5 * MS,
        end=T0 + 6 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "AGENT",
            c.OI_GRAPH_NODE_ID: "Writer",
            c.OI_OUTPUT_VALUE: json.dumps({"raw": "Lyon, a city of 225,520."}),
        },
    )
    crew.end(end_time=T0 + 7 * MS)
    return span_records(recorder.spans)


def test_an_agent_span_with_no_model_call_beneath_is_its_answer_after_its_tools() -> None:
    result = assemble_trajectory("r", _crew_without_model_spans())
    assert [(s.agent, s.kind, s.tool_name, s.content) for s in result.steps] == [
        ("Researcher", StepKind.TOOL, "census_lookup", "Lyon: 522,250 inhabitants"),
        ("Researcher", StepKind.MESSAGE, None, "Lyon has 225,520 inhabitants."),
        ("Writer", StepKind.MESSAGE, None, "Lyon, a city of 225,520."),
    ]
    assert result.final_answer == "Lyon, a city of 225,520."


def _spans_with_event_spans() -> list[SpanRecord]:
    """An agent, its tool and its model, each with an instant child span of its own kind
    recording one of its events (BeeAI: `error` beneath the tool that failed,
    `final_answer` beneath the agent, `error` beneath a model call)."""
    recorder = SpanRecorder()
    agent = recorder.tracer.start_span(
        "researcher",
        start_time=T0,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "AGENT",
            c.OI_AGENT_NAME: "researcher",
            c.OI_INPUT_VALUE: "Population of Lyon",
            c.OI_OUTPUT_VALUE: "Lyon has 225,520 inhabitants.",
        },
    )
    model = recorder.tracer.start_span(
        "OpenAIChatModel",
        context=trace.set_span_in_context(agent),
        start_time=T0 + MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "LLM",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "census",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{}",
        },
    )
    recorder.span(
        "start",
        parent=model,
        start=T0 + MS,
        end=T0 + MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: "LLM", c.OI_INPUT_VALUE: '{"input": []}'},
    )
    model.end(end_time=T0 + 2 * MS)
    census = recorder.tracer.start_span(
        "census",
        context=trace.set_span_in_context(agent),
        start_time=T0 + 3 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "TOOL",
            c.OI_TOOL_NAME: "census",
            c.OI_INPUT_VALUE: '{"city": "Lyon"}',
        },
    )
    recorder.span(
        "error",
        parent=census,
        start=T0 + 4 * MS,
        end=T0 + 4 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "TOOL",
            c.OI_OUTPUT_VALUE: "census service timed out",
        },
        error="Tool Error",
    )
    census.set_attribute(c.OI_OUTPUT_VALUE, "ToolError: census service timed out")
    census.end(end_time=T0 + 5 * MS)
    recorder.span(
        "final_answer",
        parent=agent,
        start=T0 + 6 * MS,
        end=T0 + 6 * MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: "AGENT", c.OI_INPUT_VALUE: '{"delta": "…"}'},
    )
    agent.end(end_time=T0 + 7 * MS)
    return span_records(recorder.spans)


def test_an_instant_span_of_its_parents_kind_is_an_event_of_the_parent_not_a_step() -> None:
    result = assemble_trajectory("r", _spans_with_event_spans())
    assert [(s.agent, s.kind, s.tool_name, s.status) for s in result.steps] == [
        ("researcher", StepKind.LLM, None, StepStatus.UNSET),
        # The tool's own step, failed by the error its event recorded.
        ("researcher", StepKind.TOOL, "census", StepStatus.ERROR),
    ]
    assert result.steps[1].content == "ToolError: census service timed out"
    assert result.steps[1].error and "Tool Error" in result.steps[1].error
    assert result.agents == ("researcher",)


@pytest.mark.parametrize(
    "tasks_attribute",
    # OpenInference's name, and OpenLLMetry's for the same list.
    [c.CREWAI_CREW_TASKS, c.TRACELOOP_CREWAI_CREW_TASKS],
)
def test_a_crews_task_is_its_first_tasks_description_never_a_tools_arguments(
    tasks_attribute: str,
) -> None:
    result = assemble_trajectory("r", _crew_without_model_spans(tasks_attribute))
    assert result.task == "What is the population of Lyon?"
