"""Whose steps a delegation's are: an agent called as a tool, a tool during which another
agent worked, a graph node that only runs the tools another node asked for."""

from __future__ import annotations

import json

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Status, StatusCode

from faultfinder import conventions as c
from faultfinder.attributors.model import StepKind, StepStatus
from faultfinder.reading.assembler import assemble_trajectory
from faultfinder.reading.model import SpanRecord
from tests.otlp_helpers import (
    MS,
    T0,
    SpanRecorder,
    input_messages,
    output_messages,
    span_records,
)


def _tool_call_output(name: str, arguments: str) -> str:
    return json.dumps(
        [
            {
                "role": "assistant",
                "parts": [
                    {"type": "tool_call", "id": "call_0", "name": name, "arguments": arguments}
                ],
                "finish_reason": "tool_call",
            }
        ]
    )


def pydantic_ai_delegation_spans(*, lookup_fails: bool) -> tuple[ReadableSpan, ...]:
    """Agent delegation as pydantic-ai's own instrumentation (version 5) records it.

    invoke_agent Orchestrator            (final_result when the run succeeds)
    ├── chat local                       → LLM, calls ask_price_lookup
    ├── execute_tool ask_price_lookup    (container: the delegated run is beneath it)
    │   └── invoke_agent PriceLookup
    │       ├── chat local               → LLM, calls lookup_price
    │       ├── execute_tool lookup_price → TOOL, raises or returns 1.2
    │       └── chat local               → LLM, answers (when the lookup worked)
    └── chat local                       → LLM, answers (when the lookup worked)

    Every span below an agent run carries the run's `gen_ai.agent.name` (pydantic-ai
    copies it from baggage); the spans of one run share a `gen_ai.conversation.id`.
    """
    recorder = SpanRecorder({c.SERVICE_NAME: "shop"}, scope="pydantic-ai")
    tracer = recorder.tracer

    def agent_attributes(agent: str, conversation: str) -> dict[str, str]:
        return {c.GEN_AI_AGENT_NAME: agent, c.GEN_AI_CONVERSATION_ID: conversation}

    def chat(parent: trace.Span, at: int, agent: str, user: str, output: str) -> None:
        recorder.span(
            "chat local",
            parent=parent,
            start=T0 + at * MS,
            end=T0 + (at + 1) * MS,
            attributes={
                c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
                **agent_attributes(agent, f"conversation-{agent}"),
                c.GEN_AI_REQUEST_MODEL: "local",
                c.GEN_AI_INPUT_MESSAGES: input_messages(("user", user)),
                c.GEN_AI_OUTPUT_MESSAGES: output,
                c.GEN_AI_USAGE_INPUT_TOKENS: 35,
                c.GEN_AI_USAGE_OUTPUT_TOKENS: 13,
            },
        )

    def agent_run(name: str, parent: trace.Span | None, at: int) -> trace.Span:
        return tracer.start_span(
            f"invoke_agent {name}",
            context=trace.set_span_in_context(parent) if parent is not None else None,
            start_time=T0 + at * MS,
            attributes={
                c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT,
                "agent_name": name,
                **agent_attributes(name, f"conversation-{name}"),
                "logfire.msg": f"{name} run",
            },
        )

    def tool_span(name: str, parent: trace.Span, at: int, agent: str, arguments: str) -> trace.Span:
        return tracer.start_span(
            f"execute_tool {name}",
            context=trace.set_span_in_context(parent),
            start_time=T0 + at * MS,
            attributes={
                c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
                c.GEN_AI_TOOL_NAME: name,
                c.GEN_AI_TOOL_CALL_ID: "call_0",
                c.GEN_AI_TOOL_CALL_ARGUMENTS: arguments,
                **agent_attributes(agent, f"conversation-{agent}"),
            },
        )

    def fail(span: trace.Span, error: Exception, at: int) -> None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end(end_time=T0 + at * MS)

    orchestrator = agent_run("Orchestrator", None, 0)
    chat(
        orchestrator,
        1,
        "Orchestrator",
        "What does a pen cost?",
        _tool_call_output("ask_price_lookup", '{"item": "pen"}'),
    )
    delegate = tool_span("ask_price_lookup", orchestrator, 3, "Orchestrator", '{"item":"pen"}')
    price_lookup = agent_run("PriceLookup", delegate, 4)
    chat(
        price_lookup,
        5,
        "PriceLookup",
        "Unit price of a pen?",
        _tool_call_output("lookup_price", '{"item": "pen"}'),
    )
    lookup = tool_span("lookup_price", price_lookup, 7, "PriceLookup", '{"item":"pen"}')
    if lookup_fails:
        error = LookupError("no catalog entry for 'pen'")
        for at, span in enumerate((lookup, price_lookup, delegate, orchestrator), start=8):
            fail(span, error, at)
        return recorder.spans
    lookup.set_attribute(c.GEN_AI_TOOL_CALL_RESULT, "1.2")
    lookup.end(end_time=T0 + 8 * MS)
    chat(price_lookup, 9, "PriceLookup", "Unit price of a pen?", output_messages("1.2 EUR"))
    price_lookup.set_attribute(c.PYDANTIC_AI_FINAL_RESULT, "1.2 EUR")
    price_lookup.end(end_time=T0 + 11 * MS)
    delegate.set_attribute(c.GEN_AI_TOOL_CALL_RESULT, "1.2 EUR")
    delegate.end(end_time=T0 + 12 * MS)
    chat(orchestrator, 13, "Orchestrator", "What does a pen cost?", output_messages("1.20 EUR"))
    orchestrator.set_attribute(c.PYDANTIC_AI_FINAL_RESULT, "A pen costs 1.20 EUR.")
    orchestrator.end(end_time=T0 + 15 * MS)
    return recorder.spans


def test_pydantic_ai_delegation_reads_as_the_delegate_steps_inside_the_caller() -> None:
    result = assemble_trajectory(
        "r", span_records(pydantic_ai_delegation_spans(lookup_fails=False))
    )
    assert [(s.agent, s.kind, s.tool_name) for s in result.steps] == [
        ("Orchestrator", StepKind.LLM, None),
        ("PriceLookup", StepKind.LLM, None),
        ("PriceLookup", StepKind.TOOL, "lookup_price"),
        ("PriceLookup", StepKind.LLM, None),
        ("Orchestrator", StepKind.LLM, None),
    ]
    assert result.steps[1].content == 'lookup_price({"item": "pen"})'
    assert (result.steps[2].tool_arguments, result.steps[2].tool_result) == (
        '{"item":"pen"}',
        "1.2",
    )
    assert result.task == "What does a pen cost?"
    # The root agent run's `final_result` is the run's answer.
    assert result.final_answer == "A pen costs 1.20 EUR."


def test_pydantic_ai_raising_tool_is_the_failed_step_of_the_delegate() -> None:
    result = assemble_trajectory("r", span_records(pydantic_ai_delegation_spans(lookup_fails=True)))
    assert [(s.agent, s.kind) for s in result.steps] == [
        ("Orchestrator", StepKind.LLM),
        ("PriceLookup", StepKind.LLM),
        ("PriceLookup", StepKind.TOOL),
    ]
    # The delegating tool call and both agent runs failed too, but they are containers.
    (failed,) = [step for step in result.steps if step.status is StepStatus.ERROR]
    assert failed.tool_name == "lookup_price" and "no catalog entry" in (failed.error or "")
    assert result.final_answer is None


def _graph_spans(*, tool_fails: bool = False) -> SpanRecorder:
    """A graph whose `researcher` node asks for a tool that a separate `tools` node runs,
    then a `writer` node answers (LangGraph's ToolNode pattern)."""

    def node(name: str) -> dict[str, object]:
        return {c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_CHAIN, c.OI_GRAPH_NODE_ID: name}

    recorder = SpanRecorder()
    root = recorder.span("graph", start=T0, end=T0 + 10 * MS)
    researcher = recorder.span("researcher", parent=root, start=T0, end=T0 + 2 * MS)
    recorder.span(
        "ChatOpenAI",
        parent=researcher,
        start=T0,
        end=T0 + MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_LLM,
            c.OI_AGENT_NAME: "researcher",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "census",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{}",
        },
    )
    tools = recorder.span(
        "tools", parent=root, start=T0 + 3 * MS, end=T0 + 5 * MS, attributes=node("tools")
    )
    recorder.span(
        "census",
        parent=tools,
        start=T0 + 3 * MS,
        end=T0 + 4 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_TOOL,
            c.OI_TOOL_NAME: "census",
            c.OI_AGENT_NAME: "tools",
            **({} if tool_fails else {c.OI_OUTPUT_VALUE: "522,250"}),
        },
        error="CensusDown: timed out" if tool_fails else None,
    )
    recorder.span(
        "ChatOpenAI",
        parent=root,
        start=T0 + 6 * MS,
        end=T0 + 7 * MS,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_LLM,
            c.OI_AGENT_NAME: "writer",
            "llm.output_messages.0.message.content": "225,520",
        },
    )
    return recorder


def test_tool_steps_of_a_node_that_only_runs_tools_belong_to_the_agent_that_asked() -> None:
    result = assemble_trajectory("r", span_records(_graph_spans().spans))
    assert [(s.agent, s.kind, s.tool_name) for s in result.steps] == [
        ("researcher", StepKind.LLM, None),
        ("researcher", StepKind.TOOL, "census"),
        ("writer", StepKind.LLM, None),
    ]
    # Nobody asked for it: the tool keeps the agent it had.
    recorder = SpanRecorder()
    recorder.span(
        "census",
        start=T0,
        end=T0 + MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_TOOL, c.OI_TOOL_NAME: "census"},
    )
    (alone,) = assemble_trajectory("r", span_records(recorder.spans)).steps
    assert alone.agent != "researcher" and alone.kind is StepKind.TOOL


def test_a_failed_step_that_produced_nothing_reads_as_its_error() -> None:
    result = assemble_trajectory("r", span_records(_graph_spans(tool_fails=True).spans))
    failed = result.steps[1]
    assert (failed.agent, failed.status) == ("researcher", StepStatus.ERROR)
    assert failed.content == failed.error == "CensusDown: timed out"


def _delegating_tool(*, member_inside: bool) -> list[SpanRecord]:
    """A leader's tool that hands the task to a member agent whose run is traced beside the
    tool's span, not beneath it (Agno's `delegate_task_to_member`); `member_inside`: the
    member's model turns begin while the tool runs, else after it ended (two tools)."""
    recorder = SpanRecorder()
    leader = recorder.tracer.start_span(
        "coordinator.run",
        start_time=T0,
        attributes={c.OPENINFERENCE_SPAN_KIND: "AGENT", c.OI_AGENT_NAME: "coordinator"},
    )

    def llm(parent: trace.Span, at: int, text: str | None, tool: str | None = None) -> None:
        attributes: dict[str, str] = {
            c.OPENINFERENCE_SPAN_KIND: "LLM",
            "llm.output_messages.0.message.role": "assistant",
        }
        if text is not None:
            attributes["llm.output_messages.0.message.content"] = text
        if tool is not None:
            prefix = "llm.output_messages.0.message.tool_calls.0.tool_call.function."
            attributes[prefix + "name"] = tool
            attributes[prefix + "arguments"] = "{}"
        recorder.span("chat", parent=parent, start=at, end=at + MS // 2, attributes=attributes)

    def tool(parent: trace.Span, name: str, start: int, end: int, result: str) -> None:
        attributes = {
            c.OPENINFERENCE_SPAN_KIND: "TOOL",
            c.OI_TOOL_NAME: name,
            c.OI_OUTPUT_VALUE: result,
        }
        recorder.span(name, parent=parent, start=start, end=end, attributes=attributes)

    llm(leader, T0 + MS, None, "delegate")
    delegate_end = T0 + 9 * MS if member_inside else T0 + 3 * MS
    tool(leader, "delegate", T0 + 2 * MS, delegate_end, "Lyon has 225,520 inhabitants.")
    member_start = T0 + 3 * MS if member_inside else T0 + 4 * MS
    member = recorder.tracer.start_span(
        "researcher.run",
        context=trace.set_span_in_context(leader),
        start_time=member_start,
        attributes={c.OPENINFERENCE_SPAN_KIND: "AGENT", c.OI_AGENT_NAME: "researcher"},
    )
    llm(member, member_start + MS, None, "census_lookup")
    tool(member, "census_lookup", member_start + 2 * MS, member_start + 3 * MS, "522,250")
    llm(member, member_start + 4 * MS, "Lyon has 225,520 inhabitants.")
    member.end(end_time=member_start + 5 * MS)
    llm(leader, T0 + 10 * MS, "Lyon has 225,520 inhabitants.")
    leader.end(end_time=T0 + 11 * MS)
    return span_records(recorder.spans)


def test_a_tool_during_which_another_agent_worked_reads_at_its_end() -> None:
    result = assemble_trajectory("r", _delegating_tool(member_inside=True))
    assert [(s.agent, s.kind, s.tool_name) for s in result.steps] == [
        ("coordinator", StepKind.LLM, None),
        ("researcher", StepKind.LLM, None),
        ("researcher", StepKind.TOOL, "census_lookup"),
        ("researcher", StepKind.LLM, None),
        # The member's answer, returned to the leader: after the member gave it.
        ("coordinator", StepKind.TOOL, "delegate"),
        ("coordinator", StepKind.LLM, None),
    ]


def test_a_tool_with_no_model_turn_during_it_reads_at_its_start() -> None:
    result = assemble_trajectory("r", _delegating_tool(member_inside=False))
    assert [(s.agent, s.tool_name) for s in result.steps][:3] == [
        ("coordinator", None),
        ("coordinator", "delegate"),
        ("researcher", None),
    ]
