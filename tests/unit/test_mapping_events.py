"""Messages recorded as span events (the GenAI conventions before message attributes, as
Strands Agents and Semantic Kernel record them by default) read like the attributes of
today's conventions: real SDK spans, decoded from OTLP like every other."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from faultfinder import conventions as c
from faultfinder.attributors.model import StepKind, StepStatus
from faultfinder.reading.assembler import assemble_trajectory
from faultfinder.reading.mapping import MappedSpan, map_span, requests_tools
from faultfinder.reading.model import SpanRecord
from tests.otlp_helpers import MS, T0, SpanRecorder, span_records

CENSUS = "Lyon: 522,250 inhabitants (2021 census)."


def _blocks(*blocks: Mapping[str, Any]) -> str:
    return json.dumps(list(blocks))


Event = tuple[str, Mapping[str, Any]]


def _record(
    name: str, attributes: Mapping[str, Any], events: Sequence[Event], *, error: str = ""
) -> SpanRecord:
    return _records([(name, attributes, events, error)])[0]


def _records(
    specs: Sequence[tuple[str, Mapping[str, Any], Sequence[Event], str]],
) -> list[SpanRecord]:
    """Spans nested in order (each the child of the one before), each with its events."""
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    recorder = SpanRecorder()
    spans = []
    context = None
    for offset, (name, attributes, events, error) in enumerate(specs):
        span = recorder.tracer.start_span(
            name, context=context, start_time=T0 + offset * MS, attributes=dict(attributes)
        )
        for event, event_attributes in events:
            span.add_event(event, dict(event_attributes), timestamp=T0 + offset * MS)
        if error:
            span.set_status(Status(StatusCode.ERROR, error))
        spans.append(span)
        context = trace.set_span_in_context(span)
    for offset, span in enumerate(reversed(spans)):
        span.end(end_time=T0 + (100 + offset) * MS)
    return span_records(recorder.spans)


def _chat(*events: Event) -> MappedSpan:
    return map_span(_record("chat", {c.GEN_AI_OPERATION_NAME: c.OP_CHAT}, events))


def test_per_message_events_give_a_model_calls_input_and_output() -> None:
    facts = _chat(
        (c.EVENT_GEN_AI_SYSTEM_MESSAGE, {"content": _blocks({"text": "You look figures up."})}),
        (c.EVENT_GEN_AI_USER_MESSAGE, {"content": "How many people live in Lyon?"}),
        (
            c.EVENT_GEN_AI_CHOICE,
            {"message": _blocks({"text": "About 522,250."}), "finish_reason": "end_turn"},
        ),
    )
    assert facts.kind is StepKind.LLM and facts.is_step_candidate
    assert facts.content == "About 522,250."
    assert facts.user_input == "How many people live in Lyon?"
    assert facts.input is not None and "You look figures up." in facts.input


def test_a_tool_call_in_a_choice_reads_as_the_call_and_hands_the_turn_on() -> None:
    use = {"toolUse": {"toolUseId": "t1", "name": "census_lookup", "input": {"city": "Lyon"}}}
    record = _record(
        "chat",
        {c.GEN_AI_OPERATION_NAME: c.OP_CHAT},
        [(c.EVENT_GEN_AI_CHOICE, {"message": _blocks(use), "finish_reason": "tool_use"})],
    )
    assert map_span(record).content == 'census_lookup({"city": "Lyon"})'
    assert requests_tools(record)


def test_an_openai_shaped_choice_with_tool_calls() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "census_lookup", "arguments": '{"city": "Lyon"}'},
            }
        ],
    }
    facts = _chat((c.EVENT_GEN_AI_CHOICE, {"message": json.dumps(message)}))
    assert facts.content == 'census_lookup({"city": "Lyon"})'


def test_tool_reports_in_the_events_answer_the_calls_they_name() -> None:
    use = {"toolUse": {"toolUseId": "t1", "name": "census_lookup", "input": {"city": "Lyon"}}}
    result = {"toolResult": {"toolUseId": "t1", "status": "success", "content": [{"text": CENSUS}]}}
    facts = _chat(
        (c.EVENT_GEN_AI_USER_MESSAGE, {"content": "How many people live in Lyon?"}),
        (c.EVENT_GEN_AI_ASSISTANT_MESSAGE, {"content": _blocks(use)}),
        (c.EVENT_GEN_AI_TOOL_MESSAGE, {"content": _blocks(result)}),
        (c.EVENT_GEN_AI_CHOICE, {"message": _blocks({"text": "Lyon has 225,520 inhabitants."})}),
    )
    (report,) = facts.tool_reports
    assert (report.tool_name, report.report) == ("census_lookup", CENSUS)
    assert json.loads(report.arguments or "") == {"city": "Lyon"}


def test_a_tool_message_answering_by_id_with_plain_text() -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "census_lookup", "arguments": "{}"},
    }
    # `id` as the conventions name the call; `tool_call_id` as the OpenAI message Semantic
    # Kernel logs whole.
    for named in ({"id": "c1"}, {"tool_call_id": "c1", "role": "tool"}):
        facts = _chat(
            (c.EVENT_GEN_AI_ASSISTANT_MESSAGE, {"content": "", "tool_calls": json.dumps([call])}),
            (c.EVENT_GEN_AI_TOOL_MESSAGE, {"content": CENSUS, **named}),
            (c.EVENT_GEN_AI_CHOICE, {"message": "Done."}),
        )
        assert [r.report for r in facts.tool_reports] == [CENSUS], named


def test_a_tool_span_takes_its_arguments_and_result_from_its_events() -> None:
    record = _record(
        "execute_tool census_lookup",
        {c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "census_lookup"},
        [
            (
                c.EVENT_GEN_AI_TOOL_MESSAGE,
                {"role": "tool", "content": '{"city": "Lyon"}', "id": "t1"},
            ),
            (c.EVENT_GEN_AI_CHOICE, {"message": _blocks({"text": CENSUS}), "id": "t1"}),
        ],
    )
    facts = map_span(record)
    assert facts.kind is StepKind.TOOL and facts.tool_name == "census_lookup"
    assert (facts.tool_arguments, facts.tool_result, facts.content) == (
        '{"city": "Lyon"}',
        CENSUS,
        CENSUS,
    )


def test_a_failed_tool_span_keeps_its_status_and_its_report() -> None:
    record = _record(
        "execute_tool census_lookup",
        {c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "census_lookup"},
        [(c.EVENT_GEN_AI_CHOICE, {"message": _blocks({"text": "Error: census timed out"})})],
        error="census timed out",
    )
    facts = map_span(record)
    assert facts.status is StepStatus.ERROR and facts.error == "census timed out"
    assert facts.tool_result == "Error: census timed out"


def test_the_operation_details_event_carries_todays_attributes() -> None:
    output = [{"role": "assistant", "parts": [{"type": "text", "content": "About 522,250."}]}]
    facts = _chat(
        (
            c.EVENT_GEN_AI_OPERATION_DETAILS,
            {
                c.GEN_AI_INPUT_MESSAGES: json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": "Lyon?"}]}]
                ),
                c.GEN_AI_OUTPUT_MESSAGES: json.dumps(output),
            },
        )
    )
    assert (facts.content, facts.user_input) == ("About 522,250.", "Lyon?")


def test_the_oldest_prompt_and_completion_events() -> None:
    facts = _chat(
        (c.EVENT_GEN_AI_CONTENT_PROMPT, {c.GEN_AI_PROMPT: "How many people live in Lyon?"}),
        (c.EVENT_GEN_AI_CONTENT_COMPLETION, {c.GEN_AI_COMPLETION: "About 522,250."}),
    )
    assert (facts.content, facts.user_input) == ("About 522,250.", "How many people live in Lyon?")


def test_attributes_win_over_events() -> None:
    attributes = {
        c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
        c.GEN_AI_OUTPUT_MESSAGES: json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "From the attribute."}]}]
        ),
    }
    record = _record("chat", attributes, [(c.EVENT_GEN_AI_CHOICE, {"message": "From the event."})])
    assert map_span(record).content == "From the attribute."


def test_other_events_and_malformed_content_change_nothing_and_never_raise() -> None:
    plain = _chat(("retry", {"attempt": 2}))
    assert plain.content is None and plain.input is None
    odd = _chat(
        (c.EVENT_GEN_AI_USER_MESSAGE, {"content": "[not json"}),
        (c.EVENT_GEN_AI_CHOICE, {"message": '{"unterminated'}),
        (c.EVENT_GEN_AI_ASSISTANT_MESSAGE, {"content": "[1, 2]", "tool_calls": "not json"}),
    )
    assert odd.user_input == "[not json" and odd.content == '{"unterminated'


def test_a_self_traced_agent_run_assembles_with_its_steps_and_task() -> None:
    """An agent's run as Strands Agents traces it: the agent span, a model call asking for
    a tool, the tool's span, and a model call answering, every message in events."""
    use = {"toolUse": {"toolUseId": "t1", "name": "census_lookup", "input": {"city": "Lyon"}}}
    result = {"toolResult": {"toolUseId": "t1", "status": "success", "content": [{"text": CENSUS}]}}
    user = (
        c.EVENT_GEN_AI_USER_MESSAGE,
        {"content": _blocks({"text": "How many people live in Lyon?"})},
    )
    recorder = SpanRecorder()
    from opentelemetry import trace

    def start(name: str, attributes: Mapping[str, Any], parent: Any, at: int) -> Any:
        context = trace.set_span_in_context(parent) if parent is not None else None
        return recorder.tracer.start_span(
            name, context=context, start_time=T0 + at * MS, attributes=dict(attributes)
        )

    agent = start(
        "invoke_agent researcher",
        {c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: "researcher"},
        None,
        0,
    )
    agent.add_event(*user)
    first = start("chat", {c.GEN_AI_OPERATION_NAME: c.OP_CHAT}, agent, 1)
    first.add_event(*user)
    first.add_event(c.EVENT_GEN_AI_CHOICE, {"message": _blocks(use)})
    first.end(end_time=T0 + 2 * MS)
    tool = start(
        "execute_tool census_lookup",
        {c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "census_lookup"},
        agent,
        3,
    )
    tool.add_event(
        c.EVENT_GEN_AI_TOOL_MESSAGE, {"role": "tool", "content": '{"city": "Lyon"}', "id": "t1"}
    )
    tool.add_event(c.EVENT_GEN_AI_CHOICE, {"message": _blocks({"text": CENSUS}), "id": "t1"})
    tool.end(end_time=T0 + 4 * MS)
    second = start("chat", {c.GEN_AI_OPERATION_NAME: c.OP_CHAT}, agent, 5)
    second.add_event(*user)
    second.add_event(c.EVENT_GEN_AI_ASSISTANT_MESSAGE, {"content": _blocks(use)})
    second.add_event(c.EVENT_GEN_AI_TOOL_MESSAGE, {"content": _blocks(result)})
    second.add_event(
        c.EVENT_GEN_AI_CHOICE, {"message": _blocks({"text": "Lyon has 225,520 inhabitants."})}
    )
    second.end(end_time=T0 + 6 * MS)
    agent.add_event(c.EVENT_GEN_AI_CHOICE, {"message": "Lyon has 225,520 inhabitants."})
    agent.end(end_time=T0 + 7 * MS)
    trajectory = assemble_trajectory("run-1", span_records(recorder.spans))
    assert trajectory.task == "How many people live in Lyon?"
    assert [(s.agent, s.kind, s.content) for s in trajectory.steps] == [
        ("researcher", StepKind.LLM, 'census_lookup({"city": "Lyon"})'),
        ("researcher", StepKind.TOOL, CENSUS),
        ("researcher", StepKind.LLM, "Lyon has 225,520 inhabitants."),
    ]
    assert trajectory.final_answer == "Lyon has 225,520 inhabitants."


def test_a_tool_result_as_text_content_blocks_is_their_text() -> None:
    for blocks in ([{"text": CENSUS}], [{"type": "text", "text": CENSUS}]):
        record = _record(
            "execute_tool census_lookup",
            {
                c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
                c.GEN_AI_TOOL_NAME: "census_lookup",
                c.GEN_AI_TOOL_CALL_RESULT: json.dumps(blocks),
            },
            [],
        )
        assert map_span(record).tool_result == CENSUS
    # Blocks of another kind beside the text are kept as the JSON they are.
    mixed = json.dumps([{"text": CENSUS}, {"image": {"format": "png"}}])
    record = _record(
        "execute_tool census_lookup",
        {c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_CALL_RESULT: mixed},
        [],
    )
    assert map_span(record).tool_result == mixed


def test_tools_reports_in_the_users_role_are_reports_not_the_users_turns() -> None:
    """Today's conventions as Strands writes them (Bedrock's shape): a tool's answer is a
    `tool_call_response` part of a message in the user's role."""
    call = {"type": "tool_call", "id": "t1", "name": "census_lookup", "arguments": {"city": "Lyon"}}
    response = {"type": "tool_call_response", "id": "t1", "response": [{"text": CENSUS}]}
    messages = [
        {"role": "user", "parts": [{"type": "text", "content": "How many people live in Lyon?"}]},
        {"role": "assistant", "parts": [call]},
        {"role": "user", "parts": [response]},
    ]
    facts = map_span(
        _record(
            "chat",
            {c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_INPUT_MESSAGES: json.dumps(messages)},
            [],
        )
    )
    assert [(r.tool_name, r.report) for r in facts.tool_reports] == [("census_lookup", CENSUS)]
    assert facts.later_user_turns == ()


def test_an_agents_whole_response_as_its_output_answers_with_its_last_reply() -> None:
    """Microsoft Agent Framework records an agent's whole response as its output: its
    tool call, the tool's report and its answer. The agent's answer is the last."""
    output = [
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "t1", "name": "census_lookup", "arguments": "{}"}
            ],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "t1", "response": CENSUS}]},
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "Lyon has 225,520 inhabitants."}],
        },
    ]
    attributes = {
        c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT,
        c.GEN_AI_AGENT_NAME: "coordinator",
        c.GEN_AI_OUTPUT_MESSAGES: json.dumps(output),
    }
    assert map_span(_record("invoke_agent coordinator", attributes, [])).content == (
        "Lyon has 225,520 inhabitants."
    )
    # A model call's output is what it said, all of it.
    chat = {c.GEN_AI_OPERATION_NAME: c.OP_CHAT, c.GEN_AI_OUTPUT_MESSAGES: json.dumps(output)}
    assert CENSUS in (map_span(_record("chat", chat, [])).content or "")


def test_building_a_workflow_is_setup_not_a_run() -> None:
    """Microsoft Agent Framework sends `workflow.build`, a trace of its own, when a
    workflow is made; running it is another trace."""
    from faultfinder.reading.runs import run_facts

    built = _record(c.AGENT_FRAMEWORK_BUILD_SPAN, {}, [(c.AGENT_FRAMEWORK_BUILD_STARTED, {})])
    assert not run_facts(built).opens_run
    # A span of that name that is not the framework's record opens a run as any root does.
    assert run_facts(_record(c.AGENT_FRAMEWORK_BUILD_SPAN, {}, [])).opens_run
