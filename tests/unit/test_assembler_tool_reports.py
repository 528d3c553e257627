"""Tools no span recorded, seen only inside model calls' inputs (assembler rule 8): an
instrumentation that records model calls but not tool executions (OpenLLMetry's CrewAI,
an LLM client's alone) still shows each tool's report in the next model call's input. It
becomes a `tool` step of the calling agent, where the run records no step of that tool and
a step of the run asked for the call; and the frameworks' callback wrappers around a
recorded tool's arguments and result read as the call's own."""

from __future__ import annotations

import json
from typing import Any

import pytest

from faultfinder import conventions as c
from faultfinder.attributors.model import StepKind
from faultfinder.reading.assembler import assemble_trajectory
from faultfinder.reading.messages import (
    ToolReport,
    openinference_messages,
    tool_reports,
)
from tests.otlp_helpers import MS, T0, SpanRecorder, mapped, span_records

TASK = "How many people live in Lyon?"
REPORT = "Lyon: 522,250 inhabitants (census 2021)"
CLAIM = "Lyon has 225,520 inhabitants."


def _call(call_id: str = "call_0") -> dict[str, Any]:
    part = {"type": "tool_call", "id": call_id, "name": "census", "arguments": {"city": "Lyon"}}
    return {"role": "assistant", "parts": [part]}


def _report(call_id: str = "call_0", text: str = REPORT) -> dict[str, Any]:
    part = {"type": "tool_call_response", "id": call_id, "response": text}
    return {"role": "tool", "parts": [part]}


def _user() -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "content": TASK}]}


def _chat(
    recorder: SpanRecorder,
    at: int,
    inputs: list[dict[str, Any]],
    output: dict[str, Any],
    agent: str = "Researcher",
) -> None:
    recorder.span(
        "openai.chat",
        start=T0 + at * MS,
        end=T0 + (at + 1) * MS - 1,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_AGENT_NAME: agent,
            c.GEN_AI_INPUT_MESSAGES: json.dumps(inputs),
            c.GEN_AI_OUTPUT_MESSAGES: json.dumps([output]),
        },
    )


def _answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "parts": [{"type": "text", "content": text}]}


def test_reports_are_matched_to_their_calls_in_both_message_shapes() -> None:
    genai = tool_reports([_user(), _call(), _report(), _report("call_9", "orphan")])
    assert genai == (ToolReport("census", '{"city": "Lyon"}', REPORT),)
    openai_shaped = [
        {"role": "user", "content": TASK},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "census", "arguments": '{"city": "Lyon"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": REPORT},
    ]
    assert tool_reports(openai_shaped) == genai
    # OpenInference flattens the same messages into attributes.
    flattened = {
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": TASK,
        "llm.input_messages.1.message.role": "assistant",
        "llm.input_messages.1.message.tool_calls.0.tool_call.id": "c1",
        "llm.input_messages.1.message.tool_calls.0.tool_call.function.name": "census",
        "llm.input_messages.1.message.tool_calls.0.tool_call.function.arguments": (
            '{"city": "Lyon"}'
        ),
        "llm.input_messages.2.message.role": "tool",
        "llm.input_messages.2.message.tool_call_id": "c1",
        "llm.input_messages.2.message.content": REPORT,
    }
    assert tool_reports(openinference_messages(flattened, c.OI_LLM_INPUT_MESSAGES)) == genai
    assert openinference_messages(flattened, c.OI_LLM_INPUT_MESSAGES, flattened=False) is None
    assert tool_reports(None) == () and tool_reports([_user(), _answer(CLAIM)]) == ()


def test_a_report_no_span_recorded_becomes_the_callers_tool_step() -> None:
    recorder = SpanRecorder()
    _chat(recorder, 0, [_user()], _call())
    _chat(recorder, 2, [_user(), _call(), _report()], _answer(CLAIM))
    # A later call sees the same report again: still one step.
    _chat(recorder, 4, [_user(), _call(), _report(), _answer(CLAIM)], _answer("Done."))
    steps = assemble_trajectory("r", span_records(recorder.spans)).steps
    assert [(s.index, s.agent, s.kind, s.tool_name) for s in steps] == [
        (0, "Researcher", StepKind.LLM, None),
        (1, "Researcher", StepKind.TOOL, "census"),
        (2, "Researcher", StepKind.LLM, None),
        (3, "Researcher", StepKind.LLM, None),
    ]
    assert (steps[1].content, steps[1].tool_result, steps[1].tool_arguments) == (
        REPORT,
        REPORT,
        '{"city": "Lyon"}',
    )


def test_a_call_is_matched_however_its_arguments_were_spelled() -> None:
    # The reply gives the arguments as compact JSON text, the next input as an object.
    recorder = SpanRecorder()
    asked = {"type": "tool_call", "id": "call_0", "name": "census"}
    compact = {"role": "assistant", "parts": [{**asked, "arguments": '{"city":"Lyon"}'}]}
    _chat(recorder, 0, [_user()], compact)
    _chat(recorder, 2, [_user(), _call(), _report()], _answer(CLAIM))
    steps = assemble_trajectory("r", span_records(recorder.spans)).steps
    assert [(s.agent, s.kind, s.tool_name) for s in steps] == [
        ("Researcher", StepKind.LLM, None),
        ("Researcher", StepKind.TOOL, "census"),
        ("Researcher", StepKind.LLM, None),
    ]


def test_a_report_first_seen_by_another_agent_is_the_callers_step() -> None:
    # The writer's model call is the first to see the researcher's call answered.
    recorder = SpanRecorder()
    _chat(recorder, 0, [_user()], _call())
    _chat(recorder, 2, [_user(), _call(), _report()], _answer(CLAIM), agent="Writer")
    steps = assemble_trajectory("r", span_records(recorder.spans)).steps
    assert [(s.agent, s.kind) for s in steps] == [
        ("Researcher", StepKind.LLM),
        ("Researcher", StepKind.TOOL),
        ("Writer", StepKind.LLM),
    ]


@pytest.mark.parametrize("recorded", [True, False])
def test_a_report_is_no_step_when_a_span_recorded_the_tool_or_no_step_made_the_call(
    recorded: bool,
) -> None:
    recorder = SpanRecorder()
    if recorded:
        _chat(recorder, 0, [_user()], _call())
        recorder.span(
            "execute_tool census",
            start=T0 + 1 * MS,
            end=T0 + 2 * MS - 1,
            attributes={
                c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
                c.GEN_AI_TOOL_NAME: "census",
                c.GEN_AI_TOOL_CALL_RESULT: REPORT,
            },
        )
    # Without the first call: the conversation's history came from elsewhere (a prompt's
    # example, an earlier run), not from a step of this run.
    _chat(recorder, 2, [_user(), _call(), _report()], _answer(CLAIM))
    steps = assemble_trajectory("r", span_records(recorder.spans)).steps
    tools = [s for s in steps if s.kind is StepKind.TOOL]
    assert len(tools) == (1 if recorded else 0)
    assert len(steps) == (3 if recorded else 1)


def test_openllmetrys_langchain_callback_wrappers_read_as_the_calls_own() -> None:
    message = {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "messages", "ToolMessage"],
        "kwargs": {"content": REPORT, "type": "tool", "name": "census"},
    }
    arguments = {
        "input_str": "{'city': 'Lyon'}",
        "tags": ["seq:step:1"],
        "metadata": {"langgraph_node": "tools"},
        "inputs": {"city": "Lyon"},
    }
    facts = mapped(
        {
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
            c.GEN_AI_TOOL_NAME: "census",
            c.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps(arguments),
            c.GEN_AI_TOOL_CALL_RESULT: json.dumps({"output": message, "kwargs": {"tags": []}}),
        }
    )
    assert (facts.tool_arguments, facts.tool_result) == ('{"city": "Lyon"}', REPORT)
    # Without `inputs`, the string LangChain was given.
    plain = mapped(
        {
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
            c.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({**arguments, "inputs": {}}),
            c.GEN_AI_TOOL_CALL_RESULT: json.dumps({"output": "522,250", "kwargs": {}}),
        }
    )
    assert (plain.tool_arguments, plain.tool_result) == ("{'city': 'Lyon'}", "522,250")
    # A tool's own result that only looks alike is left as it is.
    own = json.dumps({"output": "522,250", "unit": "people"})
    kept = mapped({c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_CALL_RESULT: own})
    assert kept.tool_result == own


def test_an_agent_invocation_saying_nothing_with_no_children_is_no_step() -> None:
    # OpenLLMetry marks each LangGraph subgraph with such a span beside its task span.
    recorder = SpanRecorder()
    recorder.span(
        "invoke_agent researcher",
        start=T0,
        end=T0 + 1,
        attributes={c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: "researcher"},
    )
    _chat(recorder, 1, [_user()], _answer(CLAIM))
    steps = assemble_trajectory("r", span_records(recorder.spans)).steps
    assert [(s.agent, s.kind) for s in steps] == [("Researcher", StepKind.LLM)]
