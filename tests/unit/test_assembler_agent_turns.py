"""Whose turn a step is in the shapes frameworks record: agent spans above model calls,
the outermost chain with no agent span, prebuilt LangGraph agents, programs as agents
whose workflow events hand the turn on."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace

from faultfinder import conventions as c
from faultfinder.attributors.model import StepKind, StepStatus
from faultfinder.reading.assembler import assemble_trajectory
from tests.otlp_helpers import (
    MS,
    T0,
    SpanRecorder,
    span_records,
)


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
