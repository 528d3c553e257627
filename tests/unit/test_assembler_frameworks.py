"""Which spans are steps, and whose, in the shapes frameworks record: agents named by their
method, tools recorded twice or around other work, agent turns without model spans,
event spans, programs as agents."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from faultfinder import conventions as c
from faultfinder.attributors.model import StepKind, StepStatus
from faultfinder.server.assembler import assemble_trajectory
from faultfinder.server.otlp.model import SpanRecord
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


def test_an_agent_span_above_a_model_call_stays_a_container() -> None:
    recorder = SpanRecorder()
    agent = recorder.tracer.start_span(
        "Researcher._execute_core",
        start_time=T0,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "AGENT",
            c.OI_GRAPH_NODE_ID: "Researcher",
            c.OI_OUTPUT_VALUE: json.dumps({"raw": "42"}),
        },
    )
    recorder.span(
        "ChatCompletion",
        parent=agent,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "LLM",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "42",
        },
    )
    agent.end(end_time=T0 + 3 * MS)
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert [(s.agent, s.kind) for s in result.steps] == [("Researcher", StepKind.LLM)]


def test_with_no_agent_span_the_outermost_chain_is_the_agent() -> None:
    """DSPy: `ReAct.forward` (CHAIN) above predictor and adapter chains, LM and tool spans."""
    recorder = SpanRecorder({"service.name": "my-service"})
    program = recorder.tracer.start_span(
        "ReAct.forward",
        start_time=T0,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "CHAIN",
            c.OI_INPUT_VALUE: json.dumps({"input_args": {"question": "How big is Lyon?"}}),
            c.OI_OUTPUT_VALUE: json.dumps({"reasoning": "…", "answer": "Big."}),
        },
    )
    predict = recorder.tracer.start_span(
        "Predict.forward",
        context=trace.set_span_in_context(program),
        start_time=T0 + MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: "CHAIN"},
    )
    recorder.span(
        "LM.__call__",
        parent=predict,
        start=T0 + 2 * MS,
        end=T0 + 3 * MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: "LLM", c.OI_OUTPUT_VALUE: "look it up"},
    )
    predict.end(end_time=T0 + 4 * MS)
    recorder.span(
        "census_lookup.__call__",
        parent=program,
        start=T0 + 5 * MS,
        end=T0 + 6 * MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: "TOOL", c.OI_OUTPUT_VALUE: "522,250"},
    )
    program.end(end_time=T0 + 7 * MS)
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert [(s.agent, s.kind, s.tool_name) for s in result.steps] == [
        ("ReAct", StepKind.LLM, None),
        ("ReAct", StepKind.TOOL, "census_lookup"),
    ]
    # The program's call arguments gathered under one name hold the user's text.
    assert result.task == "How big is Lyon?"
    assert result.final_answer == "Big."


def _react_agent_turn(
    recorder: SpanRecorder, graph: trace.Span, start: int, author: str | None, text: str
) -> None:
    """One turn of LangGraph's `create_react_agent`: its `agent` node (an AGENT span
    whose output state holds the reply, named by the agent's `name`) above the model
    call, which names only the node."""
    metadata = json.dumps({"langgraph_node": "agent", "langgraph_checkpoint_ns": f"agent:{start}"})
    reply = {"type": "ai", "data": {"content": text, "type": "ai", "name": author}}
    node = recorder.tracer.start_span(
        "agent",
        context=trace.set_span_in_context(graph),
        start_time=start,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "AGENT",
            c.OI_METADATA: metadata,
            c.OI_OUTPUT_VALUE: json.dumps({"messages": [reply]}),
        },
    )
    recorder.span(
        "ChatOpenAI",
        parent=node,
        start=start + MS,
        end=start + 2 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "LLM",
            c.OI_METADATA: metadata,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": text,
        },
    )
    node.end(end_time=start + 3 * MS)


@pytest.mark.parametrize(
    ("authors", "agents"),
    [
        (("assistant", "assistant"), ["assistant", "assistant"]),
        # Unnamed replies (create_react_agent without a name) keep the node's name.
        ((None, None), ["agent", "agent"]),
        # Two authors for one node: which is whose is not known, so the node stays.
        (("assistant", "booker"), ["agent", "agent"]),
    ],
)
def test_a_prebuilt_langgraph_agent_is_the_name_its_replies_carry(
    authors: tuple[str | None, str | None], agents: list[str]
) -> None:
    recorder = SpanRecorder()
    graph = recorder.tracer.start_span(
        "assistant",
        start_time=T0,
        attributes={c.OPENINFERENCE_SPAN_KIND: "CHAIN", c.OI_METADATA: "{}"},
    )
    _react_agent_turn(recorder, graph, T0 + MS, authors[0], "Which flight?")
    _react_agent_turn(recorder, graph, T0 + 10 * MS, authors[1], "Booked.")
    graph.end(end_time=T0 + 20 * MS)
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert [(s.agent, s.kind) for s in result.steps] == [(a, StepKind.LLM) for a in agents]


def _workflow_event(agent: str) -> str:
    return json.dumps({"input": [{"role": "user", "blocks": []}], "current_agent_name": agent})


def test_a_workflow_steps_event_gives_the_turn_to_an_agent_until_another_takes_it() -> None:
    """LlamaIndex AgentWorkflow under OpenLLMetry: the workflow's steps are siblings; the
    events some return name the agent whose turn it is (rule 10), the model calls lie
    beneath steps that name none, and a `call_tool` step is the tool call's only record,
    its model call's output empty (only text parts are kept)."""
    recorder = SpanRecorder()
    root = recorder.span(
        "AgentWorkflow.workflow",
        start=T0,
        end=T0 + 100 * MS,
        attributes={"traceloop.span.kind": "workflow"},
    )

    def step(at: int, **attributes: object) -> trace.Span:
        return recorder.span(
            "AgentWorkflow.task",
            parent=root,
            start=T0 + at * MS,
            end=T0 + (at + 5) * MS,
            attributes={"traceloop.span.kind": "task", **attributes},
        )

    def chat(parent: trace.Span, at: int, text: str | None, reason: str) -> None:
        output = [
            {
                "role": "assistant",
                "parts": [] if text is None else [{"type": "text", "content": text}],
            }
        ]
        recorder.span(
            "OpenAILike.task",
            parent=parent,
            start=T0 + (at + 1) * MS,
            end=T0 + (at + 2) * MS,
            attributes={
                c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
                c.GEN_AI_INPUT_MESSAGES: json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": "Lyon?"}]}]
                ),
                c.GEN_AI_OUTPUT_MESSAGES: json.dumps(output),
                c.GEN_AI_RESPONSE_FINISH_REASONS: [reason],
            },
        )

    step(0, **{c.TRACELOOP_ENTITY_OUTPUT: _workflow_event("researcher")})
    chat(step(10), 10, None, "tool_call")
    tool_output = {"raw_output": "Lyon: 522,250", "is_error": False, "blocks": []}
    step(
        20,
        **{
            c.OI_TOOL_NAME: "census_lookup",
            c.TRACELOOP_TOOL_ARGUMENTS: '{"city": "Lyon"}',
            c.TRACELOOP_ENTITY_OUTPUT: json.dumps(
                {"tool_name": "census_lookup", "tool_output": tool_output}
            ),
        },
    )
    step(30, **{c.TRACELOOP_ENTITY_OUTPUT: _workflow_event("writer")})
    chat(step(40), 40, "Lyon has 225,520 inhabitants.", "stop")
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert [(s.agent, s.kind, s.tool_name, s.content) for s in result.steps] == [
        ("researcher", StepKind.LLM, None, 'census_lookup({"city": "Lyon"})'),
        ("researcher", StepKind.TOOL, "census_lookup", "Lyon: 522,250"),
        ("writer", StepKind.LLM, None, "Lyon has 225,520 inhabitants."),
    ]
    assert result.steps[1].tool_arguments == '{"city": "Lyon"}'


def test_a_workflow_tool_call_that_failed_is_a_failed_step_and_a_stop_says_nothing_more() -> None:
    recorder = SpanRecorder()
    root = recorder.span("AgentWorkflow.workflow", start=T0, end=T0 + 20 * MS, attributes={})
    tool_output = {"raw_output": "census timed out", "is_error": True}
    recorder.span(
        "AgentWorkflow.task",
        parent=root,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={
            c.OI_TOOL_NAME: "census_lookup",
            c.TRACELOOP_ENTITY_OUTPUT: json.dumps(
                {"tool_kwargs": {"city": "Lyon"}, "tool_output": tool_output}
            ),
        },
    )
    # A model call that stopped with nothing to say reads as nothing, tools or not.
    recorder.span(
        "chat",
        parent=root,
        start=T0 + 3 * MS,
        end=T0 + 4 * MS,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": []}]),
            c.GEN_AI_RESPONSE_FINISH_REASONS: ["stop"],
        },
    )
    result = assemble_trajectory("r", span_records(recorder.spans))
    tool = result.steps[0]
    assert (tool.kind, tool.status, tool.error) == (
        StepKind.TOOL,
        StepStatus.ERROR,
        "census timed out",
    )
    assert tool.tool_arguments == '{"city": "Lyon"}'
    assert [s.content for s in result.steps[1:]] == [""]
