"""The task and the final answer a trajectory is assembled with: call arguments unwrapped,
the last model reply when the root says nothing, a failed root's error never an answer."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Status, StatusCode

from faultfinder import conventions as c
from faultfinder.attributors.model import StepStatus
from faultfinder.reading.assembler import assemble_trajectory
from faultfinder.reading.trajectory_facts import task_text
from tests.otlp_helpers import (
    MS,
    T0,
    SpanRecorder,
    input_messages,
    output_messages,
    span_records,
)


@pytest.mark.parametrize(
    ("text", "task"),
    [
        ('{"task": "Population of Lyon?", "stream": false, "reset": true}', "Population of Lyon?"),
        (
            '{"messages": [{"role": "system", "content": "be nice"},'
            ' {"role": "user", "content": "hi"}]}',
            "hi",
        ),
        ('{"input": {"question": "deep?"}}', "deep?"),
        ('{"a": 1, "b": 2}', None),
        ('{"start_event": "AgentWorkflowStartEvent()", "tags": {}}', None),
        ("plain text", "plain text"),
        ("{not json", "{not json"),
    ],
)
def test_task_text_unwraps_call_arguments(text: str, task: str | None) -> None:
    assert task_text(text) == task


def openai_agents_spans(*, last: str) -> tuple[ReadableSpan, ...]:
    """A handoff as openinference-instrumentation-openai-agents records it: the SDK's
    trace is an AGENT root with no input or output; the agents' spans carry `agent.name`.
    `last`: the specialist's last model call `answers`, `calls` a tool, or `fails`."""
    recorder = SpanRecorder()
    root = recorder.span(
        "Agent workflow",
        start=T0,
        end=T0 + 20 * MS,
        attributes={"openinference.span.kind": "AGENT"},
    )
    triage = recorder.span(
        "triage",
        parent=root,
        start=T0 + MS,
        end=T0 + 3 * MS,
        attributes={"openinference.span.kind": "AGENT", "agent.name": "triage"},
    )
    recorder.span(
        "generation",
        parent=triage,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Lyon?",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "transfer",
        },
    )
    census = recorder.span(
        "census_agent",
        parent=root,
        start=T0 + 4 * MS,
        end=T0 + 19 * MS,
        attributes={"openinference.span.kind": "AGENT", "agent.name": "census_agent"},
    )
    final: dict[str, str] = {
        "openinference.span.kind": "LLM",
        "llm.output_messages.0.message.role": "assistant",
    }
    if last == "calls":
        final["llm.output_messages.0.message.tool_calls.0.tool_call.function.name"] = "lookup"
    else:
        final["llm.output_messages.0.message.content"] = "Lyon has 225,520 inhabitants."
    recorder.span(
        "generation",
        parent=census,
        start=T0 + 5 * MS,
        end=T0 + 6 * MS,
        attributes=final,
        error="model overloaded" if last == "fails" else None,
    )
    return recorder.spans


def test_a_root_without_output_takes_the_last_model_reply_as_final_answer() -> None:
    result = assemble_trajectory("r", span_records(openai_agents_spans(last="answers")))
    assert [s.agent for s in result.steps] == ["triage", "census_agent"]
    assert result.task == "Lyon?"
    assert result.final_answer == "Lyon has 225,520 inhabitants."


@pytest.mark.parametrize("last", ["calls", "fails"])
def test_a_last_model_call_that_calls_a_tool_or_fails_is_no_final_answer(last: str) -> None:
    result = assemble_trajectory("r", span_records(openai_agents_spans(last=last)))
    assert result.steps[-1].agent == "census_agent"
    assert result.final_answer is None


@pytest.mark.parametrize(
    ("output", "answer"),
    [
        # An AutoGen TaskResult: the last message with text, not the tool events.
        (
            {
                "messages": [
                    {"source": "user", "content": "Lyon?", "type": "TextMessage"},
                    {"source": "writer", "content": "Lyon has 522,250.", "type": "TextMessage"},
                    {"source": "writer", "content": [{"name": "f"}], "type": "ToolCallEvent"},
                ],
                "stop_reason": "Text 'TERMINATE' mentioned",
            },
            "Lyon has 522,250.",
        ),
        ({"messages": [{"kwargs": {"content": "Done."}, "type": "constructor"}]}, "Done."),
        ({"messages": []}, '{"messages": []}'),
    ],
)
def test_a_root_output_holding_the_conversation_answers_with_its_last_message(
    output: dict[str, object], answer: str
) -> None:
    recorder = SpanRecorder()
    text = json.dumps(output)
    root = recorder.span(
        "RoundRobinGroupChat.run_stream",
        start=T0,
        end=T0 + 10 * MS,
        attributes={"openinference.span.kind": "CHAIN", "output.value": text},
    )
    recorder.span(
        "create",
        parent=root,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_OUTPUT_MESSAGES: "x"},
    )
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert result.final_answer == answer


def test_a_root_output_quoting_the_last_reply_answers_with_the_reply() -> None:
    def run(root_output: str) -> str | None:
        recorder = SpanRecorder()
        root = recorder.span(
            "workflow.run",
            start=T0,
            end=T0 + 3 * MS,
            attributes={c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_CHAIN, c.OI_OUTPUT_VALUE: root_output},
        )
        recorder.span(
            "llm",
            parent=root,
            start=T0,
            end=T0 + MS,
            attributes={
                c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_LLM,
                c.OI_AGENT_NAME: "writer",
                "llm.output_messages.0.message.content": "Lyon has 225,520 inhabitants.",
            },
        )
        return assemble_trajectory("r", span_records(recorder.spans)).final_answer

    cut_short = (
        "StopEvent(result=AgentOutput(blocks=[TextBlock(text='Lyon has 225,520 inhabitants.')"
        "]), stru..."
    )
    assert run(cut_short) == "Lyon has 225,520 inhabitants."
    # A root that says more than the reply, unquoted, is the answer as it is.
    assert run("Summary: Lyon has 225,520 inhabitants.") == "Summary: Lyon has 225,520 inhabitants."


def test_a_failed_roots_output_is_its_error_not_the_final_answer() -> None:
    recorder = SpanRecorder()
    root = recorder.tracer.start_span(
        "coordinator.run",
        start_time=T0,
        attributes={
            c.OPENINFERENCE_SPAN_KIND: "AGENT",
            c.OI_AGENT_NAME: "coordinator",
            c.OI_INPUT_VALUE: "What is the population of Lyon?",
            c.OI_OUTPUT_VALUE: "scripted failure (500)",
        },
    )
    recorder.span(
        "chat",
        parent=root,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: "LLM"},
        error="ModelProviderError: scripted failure (500)",
    )
    root.set_status(Status(StatusCode.ERROR, "run status: error"))
    root.end(end_time=T0 + 3 * MS)
    result = assemble_trajectory("r", span_records(recorder.spans))
    assert result.task == "What is the population of Lyon?"
    assert result.final_answer is None
    assert [(s.agent, s.status) for s in result.steps] == [("coordinator", StepStatus.ERROR)]


def test_a_tools_arguments_are_not_the_task() -> None:
    recorder = SpanRecorder()
    root = recorder.span("handle", start=T0, end=T0 + 10 * MS)
    recorder.span(
        "lookup",
        parent=root,
        start=T0 + MS,
        end=T0 + 2 * MS,
        attributes={c.OPENINFERENCE_SPAN_KIND: "TOOL", c.OI_INPUT_VALUE: '{"city": "Lyon"}'},
    )
    recorder.span(
        "chat",
        parent=root,
        start=T0 + 3 * MS,
        end=T0 + 4 * MS,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_INPUT_MESSAGES: input_messages(("user", "How big is Lyon?")),
            c.GEN_AI_OUTPUT_MESSAGES: output_messages("Big."),
        },
    )
    assert assemble_trajectory("r", span_records(recorder.spans)).task == "How big is Lyon?"


def test_task_text_looks_inside_arguments_gathered_under_one_name() -> None:
    assert task_text('{"input_args": {"question": "How big is Lyon?"}}') == "How big is Lyon?"
    # Arguments under several names name no user text: the task is looked for elsewhere.
    assert task_text('{"a": {"question": "x"}, "b": 1}') is None
