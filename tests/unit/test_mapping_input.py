"""Mapping whatever arrives: odd attribute types and values, messages only a lenient reader
accepts, the run's facts and a reply's tool requests."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from faultfinder import conventions as c
from faultfinder.reading.mapping import map_span, requests_tools
from faultfinder.reading.model import SpanEvent, SpanRecord
from faultfinder.reading.runs import run_facts, with_run_id
from tests.otlp_helpers import (
    MS,
    T0,
    SpanRecorder,
    mapped,
    output_messages,
    span_records,
)


def test_odd_attribute_types_fall_back_to_text_instead_of_failing() -> None:
    facts = mapped(
        {
            c.STEP_INDEX: "7",
            c.GEN_AI_AGENT_NAME: 42,
            c.GEN_AI_OUTPUT_MESSAGES: "{not json",
            c.STEP_ROLE: ("a", "b"),
            c.GEN_AI_OPERATION_NAME: 3,
            c.GEN_AI_TOOL_CALL_ARGUMENTS: ("x", "y"),
        }
    )
    assert facts.step_index == 7
    assert facts.agent == "42"
    assert facts.content == "{not json"
    assert facts.role == '["a", "b"]'
    assert facts.tool_arguments == '["x", "y"]'
    for bad_index in (-1, True, 2.5, "seven"):
        assert mapped({c.STEP_INDEX: bad_index}).step_index is None
    assert mapped({c.STEP_INDEX: 3.0}).step_index == 3
    # A list of strings (an SDK sequence attribute) reads as one text per item.
    assert mapped({c.GEN_AI_OUTPUT_MESSAGES: ("one", "two")}).content == "one\ntwo"


attribute_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=30)
    | st.binary(max_size=10)
    | st.sampled_from(["[", "{}", "[{}]", '[{"parts": 5}]', '[{"parts": [{"type": 1}]}]', "null"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
known_keys = st.sampled_from(
    [
        c.STEP_INDEX,
        c.STEP_KIND,
        c.STEP_CONTENT,
        c.GEN_AI_OPERATION_NAME,
        c.GEN_AI_AGENT_NAME,
        c.GEN_AI_INPUT_MESSAGES,
        c.GEN_AI_OUTPUT_MESSAGES,
        c.GEN_AI_TOOL_CALL_RESULT,
        c.OPENINFERENCE_SPAN_KIND,
        c.OI_LLM_OUTPUT_MESSAGES,
        "llm.output_messages.0.message.content",
        "llm.input_messages.0.message.role",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
        c.OI_OUTPUT_VALUE,
        c.ERROR_TYPE,
        c.GEN_AI_USAGE_INPUT_TOKENS,
        c.RUN_ID,
        c.GEN_AI_CONVERSATION_ID,
        c.OI_SESSION_ID,
    ]
)


@settings(max_examples=200, deadline=None, database=None)
@given(st.dictionaries(known_keys, attribute_values, max_size=6), attribute_values)
def test_any_attribute_values_map_without_raising(attributes: dict[str, Any], event: Any) -> None:
    # Decoded kvlist/bytes values cannot be produced by the Python SDK, hence a SpanRecord here.
    record = SpanRecord(
        trace_id="1" * 32,
        span_id="2" * 16,
        parent_span_id=None,
        name="s",
        start_time_unix_nano=T0,
        end_time_unix_nano=T0 + MS,
        attributes=attributes,
        events=(SpanEvent(c.EXCEPTION_EVENT, T0, {c.EXCEPTION_TYPE: event}),),
    )
    facts = map_span(record)
    assert facts.content is None or isinstance(facts.content, str)
    assert facts.agent is None or isinstance(facts.agent, str)
    for grouping in (False, True):
        # The run id stamped at decoding is the run the store files the span under.
        stamped = with_run_id(record, group_by_conversation=grouping)
        assert isinstance(stamped.run_id, str) and stamped.run_id
        assert run_facts(stamped).run_id == stamped.run_id


def test_input_messages_only_the_standard_json_reader_accepts_are_still_read() -> None:
    # A client serialising with Python's json may send NaN and integers beyond 64 bits.
    messages = (
        '[{"role": "system", "parts": [{"type": "text", "content": "Be brief."}],'
        ' "seed": 123456789012345678901234567890},'
        ' {"role": "user", "parts": [{"type": "text", "content": "Sum the column."}],'
        ' "temperature": NaN}]'
    )
    facts = mapped(
        {
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_INPUT_MESSAGES: messages,
            c.GEN_AI_OUTPUT_MESSAGES: output_messages("42"),
        }
    )
    assert facts.input == "Be brief.\nSum the column."
    assert facts.user_input == "Sum the column."
    assert facts.content == "42"


def test_run_facts_read_outcome_and_answers() -> None:
    recorder = SpanRecorder()
    recorder.span(
        "run",
        start=T0,
        end=T0 + MS,
        attributes={
            c.RUN_OUTCOME: " Failure ",
            c.RUN_TASK: "Sum the column.",
            c.RUN_GROUND_TRUTH: "42",
            c.RUN_FINAL_ANSWER: "41",
        },
    )
    facts = run_facts(span_records(recorder.spans)[0])
    assert facts.is_root and facts.failed and facts.outcome == "failure"
    assert (facts.task, facts.ground_truth, facts.final_answer) == ("Sum the column.", "42", "41")


def record_of(attributes: Mapping[str, Any]) -> SpanRecord:
    recorder = SpanRecorder()
    recorder.span("span", start=T0, end=T0 + MS, attributes=attributes)
    (record,) = span_records(recorder.spans)
    return record


def test_a_reply_requests_tools_in_each_dialect() -> None:
    genai = [{"role": "assistant", "parts": [{"type": "tool_call", "name": "f", "arguments": {}}]}]
    openai = [{"role": "assistant", "content": None, "tool_calls": [{"id": "1", "function": {}}]}]
    flattened = "llm.output_messages.0.message.tool_calls.0.tool_call.function.name"
    for attributes in (
        {c.GEN_AI_OUTPUT_MESSAGES: json.dumps(genai)},
        {c.OI_LLM_OUTPUT_MESSAGES: json.dumps(openai)},
        {flattened: "f"},
    ):
        assert requests_tools(record_of(attributes)), attributes
    for attributes in (
        {c.GEN_AI_OUTPUT_MESSAGES: output_messages("42")},
        {"llm.output_messages.0.message.content": "42"},
        # A tool call the model was given (input messages) is not one it makes.
        {"llm.input_messages.1.message.tool_calls.0.tool_call.function.name": "f"},
        {c.GEN_AI_OUTPUT_MESSAGES: "not json"},
    ):
        assert not requests_tools(record_of(attributes)), attributes
