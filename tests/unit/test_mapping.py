"""Convention mapping of real SDK spans in each dialect: faultfinder, GenAI, OpenInference."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from faultfinder import conventions as c
from faultfinder.attributors.learned import answerable_agents, can_be_blamed
from faultfinder.attributors.model import Step, StepKind, StepStatus
from faultfinder.server.otlp.mapping import (
    MappedSpan,
    map_span,
    requests_tools,
    run_facts,
    run_id_of,
)
from faultfinder.server.otlp.model import SpanEvent, SpanRecord
from tests.otlp_helpers import MS, T0, SpanRecorder, input_messages, output_messages, span_records


def mapped(
    attributes: Mapping[str, Any], *, name: str = "span", error: str | None = None
) -> MappedSpan:
    """Map one span recorded by the SDK with `attributes` and sent through OTLP."""
    recorder = SpanRecorder()
    recorder.span(name, start=T0, end=T0 + MS, attributes=attributes, error=error)
    (record,) = span_records(recorder.spans)
    return map_span(record)


# --- OTel GenAI semantic conventions ------------------------------------------------------


def test_genai_chat_span_is_an_llm_step_with_its_output_text() -> None:
    facts = mapped(
        {
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_REQUEST_MODEL: "gpt-4o",
            c.GEN_AI_USAGE_INPUT_TOKENS: 120,
            c.GEN_AI_USAGE_OUTPUT_TOKENS: 30,
            c.GEN_AI_INPUT_MESSAGES: input_messages(
                ("system", "Be brief."),
                ("user", "What is 2+2?"),
                ("assistant", "4"),
                ("user", "Sure?"),
            ),
            c.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [
                            {"type": "reasoning", "content": "trivial"},
                            {"type": "text", "content": "Yes, "},
                            {"type": "text", "content": "it is 4."},
                        ],
                        "finish_reason": "stop",
                    }
                ]
            ),
        },
        name="chat gpt-4o",
    )
    assert facts.kind is StepKind.LLM and facts.is_step_candidate
    assert facts.content == "Yes, \nit is 4."
    assert facts.user_input == "What is 2+2?"
    assert facts.input == "Be brief.\nWhat is 2+2?\n4\nSure?"
    assert (facts.model, facts.input_tokens, facts.output_tokens) == ("gpt-4o", 120, 30)
    assert facts.agent is None and not facts.is_agent_span
    assert facts.status is StepStatus.UNSET and facts.error is None


def test_genai_tool_calls_in_output_are_rendered_as_text() -> None:
    facts = mapped(
        {
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [
                            {"type": "tool_call", "name": "search", "arguments": {"q": "oslo"}}
                        ],
                    }
                ]
            ),
        }
    )
    assert facts.content == 'search({"q": "oslo"})'


def test_genai_invoke_agent_span_names_an_agent_others_inherit() -> None:
    facts = mapped(
        {c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: "  Planner "},
        name="invoke_agent Planner",
    )
    assert facts.is_agent_span and facts.agent == "Planner"
    assert facts.kind is StepKind.MESSAGE and facts.is_step_candidate


def test_genai_execute_tool_span_is_a_tool_step() -> None:
    facts = mapped(
        {
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
            c.GEN_AI_TOOL_NAME: "get_weather",
            c.GEN_AI_TOOL_CALL_ARGUMENTS: '{"city": "Paris"}',
            c.GEN_AI_TOOL_CALL_RESULT: "rainy, 57°F",
        }
    )
    assert facts.kind is StepKind.TOOL
    assert (facts.tool_name, facts.tool_arguments, facts.tool_result) == (
        "get_weather",
        '{"city": "Paris"}',
        "rainy, 57°F",
    )
    assert facts.content == "rainy, 57°F"


def test_error_type_marks_a_step_failed_and_error_status_message_explains_it() -> None:
    by_type = mapped({c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.ERROR_TYPE: "timeout"})
    assert by_type.status is StepStatus.ERROR and by_type.error == "timeout"
    by_status = mapped({c.GEN_AI_OPERATION_NAME: c.OP_CHAT}, error="rate limited")
    assert by_status.status is StepStatus.ERROR and by_status.error == "rate limited"


def test_a_recorded_exception_gives_the_error_text() -> None:
    recorder = SpanRecorder()
    span = recorder.tracer.start_span(
        "execute_tool", start_time=T0, attributes={c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL}
    )
    span.record_exception(KeyError("missing column 'price'"))
    span.end(end_time=T0 + MS)
    facts = map_span(span_records(recorder.spans)[0])
    assert facts.error == "KeyError: \"missing column 'price'\""


# --- OpenInference -------------------------------------------------------------------------


def test_openinference_llm_span_reads_flattened_messages() -> None:
    facts = mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: "LLM",
            c.OI_LLM_MODEL_NAME: "llama-3",
            c.OI_AGENT_NAME: "Researcher",
            "llm.input_messages.0.message.role": "system",
            "llm.input_messages.0.message.content": "You research.",
            "llm.input_messages.1.message.role": "user",
            "llm.input_messages.1.message.content": "Population of Oslo?",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "About 700k.",
            "llm.output_messages.1.message.role": "assistant",
            "llm.output_messages.1.message.tool_calls.0.tool_call.function.name": "lookup",
            "llm.output_messages.1.message.tool_calls.0.tool_call.function.arguments": '{"x": 1}',
            "llm.output_messages.10.message.contents.1.message_content.text": "second",
            "llm.output_messages.10.message.contents.0.message_content.text": "first",
            c.OI_OUTPUT_VALUE: "raw output that loses to the messages",
        }
    )
    assert facts.kind is StepKind.LLM and facts.agent == "Researcher"
    # Message 10 sorts after 1 numerically, and parts keep their own order.
    assert facts.content == 'About 700k.\nlookup({"x": 1})\nfirst\nsecond'
    assert facts.user_input == "Population of Oslo?"
    assert facts.input == "You research.\nPopulation of Oslo?"
    assert facts.model == "llama-3"


def test_openinference_tool_span_takes_tool_fields_and_output_value() -> None:
    facts = mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: "TOOL",
            c.OI_TOOL_NAME: "calculator",
            c.OI_TOOL_PARAMETERS: '{"expr": "2*21"}',
            c.OI_OUTPUT_VALUE: "42",
        }
    )
    assert facts.kind is StepKind.TOOL
    assert (facts.tool_name, facts.tool_arguments, facts.tool_result) == (
        "calculator",
        '{"expr": "2*21"}',
        "42",
    )
    assert facts.content == "42"


def test_openinference_guardrail_span_is_a_check_that_can_be_blamed() -> None:
    # A guardrail that wrongly blocked an answer is a step of the run, not bookkeeping.
    facts = mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: "GUARDRAIL",
            c.OI_INPUT_VALUE: "The capital of Australia is Canberra.",
            c.OI_OUTPUT_VALUE: "blocked: possible prompt injection",
        }
    )
    assert facts.is_step_candidate and facts.kind is StepKind.TOOL
    assert facts.content == "blocked: possible prompt injection"
    step = Step(index=1, agent="output-filter", kind=facts.kind, content=facts.content)
    writer = Step(index=0, agent="writer", content="The capital of Australia is Canberra.")
    assert can_be_blamed(step)
    assert answerable_agents([writer, step]) == ["writer", "writer"]


def test_openinference_tool_span_takes_arguments_from_input_not_from_the_schema() -> None:
    # As `@tracer.tool` of openinference-instrumentation records a call that raised:
    # `tool.parameters` holds the tool's JSON schema, `input.value` the call's arguments.
    schema = json.dumps(
        {
            "type": "object",
            "title": "population_lookup",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        }
    )
    facts = mapped(
        {
            c.OI_INPUT_VALUE: '{"city": "Lyon"}',
            "input.mime_type": "application/json",
            c.OI_TOOL_NAME: "population_lookup",
            c.OI_TOOL_PARAMETERS: schema,
            c.OPENINFERENCE_SPAN_KIND: "TOOL",
        },
        name="population_lookup",
        error="KeyError: \"no census record for 'Lyon'\"",
    )
    assert facts.kind is StepKind.TOOL and facts.tool_name == "population_lookup"
    assert facts.tool_arguments == '{"city": "Lyon"}'
    assert facts.tool_result is None
    assert facts.status is StepStatus.ERROR and "no census record" in (facts.error or "")


def test_openinference_token_counts_are_read() -> None:
    # As openinference-instrumentation-openai records a chat completion.
    facts = mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: "LLM",
            c.OI_LLM_MODEL_NAME: "local",
            "llm.token_count.total": 47,
            c.OI_LLM_TOKEN_COUNT_PROMPT: 37,
            c.OI_LLM_TOKEN_COUNT_COMPLETION: 10,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "Lyon is a French city.",
        },
        name="ChatCompletion",
    )
    assert (facts.input_tokens, facts.output_tokens) == (37, 10)
    # GenAI usage wins when a span carries both.
    both = mapped(
        {
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_USAGE_INPUT_TOKENS: 5,
            c.OI_LLM_TOKEN_COUNT_PROMPT: 37,
        }
    )
    assert both.input_tokens == 5


def test_openinference_agent_and_chain_spans() -> None:
    agent = mapped({c.OPENINFERENCE_SPAN_KIND: "AGENT", c.OI_GRAPH_NODE_ID: "writer"})
    assert agent.is_agent_span and agent.agent == "writer" and agent.is_step_candidate
    # A chain (prompt template, output parser) is plumbing, not a step.
    chain = mapped({c.OPENINFERENCE_SPAN_KIND: "CHAIN", c.OI_OUTPUT_VALUE: "formatted prompt"})
    assert not chain.is_step_candidate and not chain.is_agent_span
    # …unless it belongs to a named agent and says something.
    node = mapped(
        {c.OPENINFERENCE_SPAN_KIND: "CHAIN", c.OI_GRAPH_NODE_ID: "critic", c.OI_OUTPUT_VALUE: "ok"}
    )
    assert node.is_step_candidate and node.content == "ok" and node.agent == "critic"


# --- pydantic-ai (GenAI semconv plus a few names of its own) ----------------------------


def test_pydantic_ai_agent_run_output_is_its_content() -> None:
    # The `invoke_agent` span of a pydantic-ai agent run (instrumentation version 5).
    facts = mapped(
        {
            "model_name": "local",
            "agent_name": "Orchestrator",
            c.GEN_AI_AGENT_NAME: "Orchestrator",
            c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT,
            "logfire.msg": "Orchestrator run",
            c.PYDANTIC_AI_FINAL_RESULT: "A pen costs 1.20 EUR.",
            "pydantic_ai.all_messages": input_messages(("user", "What does a pen cost?")),
        },
        name="invoke_agent Orchestrator",
    )
    assert facts.is_agent_span and facts.agent == "Orchestrator"
    assert facts.content == "A pen costs 1.20 EUR."
    # Only an agent run's `final_result` is its output; on other spans it is no step text.
    plain = mapped({c.PYDANTIC_AI_FINAL_RESULT: "42"})
    assert plain.content is None and not plain.is_step_candidate


def test_pydantic_ai_tool_span_of_instrumentation_version_2() -> None:
    # Version 2 names its tool spans `running tool` and keeps arguments and result
    # under names of its own; the operation and tool name are GenAI's.
    facts = mapped(
        {
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
            c.GEN_AI_TOOL_NAME: "lookup_price",
            c.GEN_AI_TOOL_CALL_ID: "call_0",
            c.GEN_AI_AGENT_NAME: "PriceLookup",
            "logfire.msg": "running tool: lookup_price",
            c.PYDANTIC_AI_TOOL_ARGUMENTS: '{"item":"notebook"}',
            c.PYDANTIC_AI_TOOL_RESPONSE: "4.5",
        },
        name="running tool",
    )
    assert (facts.kind, facts.agent, facts.tool_name) == (
        StepKind.TOOL,
        "PriceLookup",
        "lookup_price",
    )
    assert (facts.tool_arguments, facts.tool_result, facts.content) == (
        '{"item":"notebook"}',
        "4.5",
        "4.5",
    )
    # The GenAI names of later versions win when both are present.
    later = mapped(
        {
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
            c.GEN_AI_TOOL_CALL_ARGUMENTS: '"pen"',
            c.PYDANTIC_AI_TOOL_ARGUMENTS: '"notebook"',
        }
    )
    assert later.tool_arguments == '"pen"'


def test_plain_spans_are_not_step_candidates() -> None:
    facts = mapped({"http.request.method": "POST", "url.full": "https://api.example/v1"})
    assert not facts.is_step_candidate and facts.content is None and facts.agent is None


# --- faultfinder's own attributes and priority ----------------------------------------------


def test_faultfinder_attributes_win_over_the_standards() -> None:
    facts = mapped(
        {
            c.STEP_INDEX: 4,
            c.STEP_KIND: "HUMAN",
            c.STEP_ROLE: "Orchestrator (thought)",
            c.STEP_CONTENT: "  exact text, spaces kept  ",
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_OUTPUT_MESSAGES: output_messages("loses"),
            c.OPENINFERENCE_SPAN_KIND: "TOOL",
        }
    )
    assert facts.step_index == 4
    assert facts.kind is StepKind.HUMAN
    assert facts.role == "Orchestrator (thought)"
    assert facts.content == "  exact text, spaces kept  "
    assert facts.is_step_candidate


def test_genai_wins_over_openinference() -> None:
    facts = mapped(
        {
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
            c.OPENINFERENCE_SPAN_KIND: "LLM",
            c.GEN_AI_AGENT_NAME: "Coder",
            c.OI_AGENT_NAME: "ignored",
            c.OI_GRAPH_NODE_ID: "ignored too",
            c.GEN_AI_OUTPUT_MESSAGES: output_messages("from genai"),
            "llm.output_messages.0.message.content": "from openinference",
            c.GEN_AI_TOOL_NAME: "grep",
            c.OI_TOOL_NAME: "ignored",
        }
    )
    assert facts.kind is StepKind.TOOL
    assert facts.agent == "Coder" and facts.content == "from genai" and facts.tool_name == "grep"
    assert mapped({c.OI_AGENT_NAME: "B", c.OI_GRAPH_NODE_ID: "C"}).agent == "B"


def test_an_unknown_step_kind_falls_back_to_the_conventions() -> None:
    facts = mapped({c.STEP_KIND: "thought", c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL})
    assert facts.kind is StepKind.TOOL


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
        # The event bus reads only the run id: it must name the run the store files under.
        run_id = run_facts(record, group_by_conversation=grouping).run_id
        assert run_id_of(record, group_by_conversation=grouping) == run_id


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


# --- OpenAI-shaped GenAI messages (AG2's TelemetryMiddleware) ------------------------------


def _openai_call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_openai_shaped_tool_calls_beside_null_content_read_as_calls() -> None:
    facts = mapped(
        {
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                [
                    {
                        "content": None,
                        "role": "assistant",
                        "tool_calls": [
                            _openai_call("census_lookup", '{"city": "Lyon"}'),
                            _openai_call("weather", "{}"),
                        ],
                    }
                ]
            ),
        }
    )
    assert facts.content == 'census_lookup({"city": "Lyon"})\nweather({})'


def test_openai_shaped_input_messages_read_with_their_calls_and_tool_results() -> None:
    facts = mapped(
        {
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_INPUT_MESSAGES: json.dumps(
                [
                    {"content": "Population of Lyon?", "role": "user"},
                    {
                        "content": "Looking it up.",
                        "role": "assistant",
                        "tool_calls": [_openai_call("census_lookup", '{"city": "Lyon"}')],
                    },
                    {"role": "tool", "tool_call_id": "call_1", "content": "Lyon: 522,250"},
                ]
            ),
            c.GEN_AI_OUTPUT_MESSAGES: output_messages("Lyon has 522,250 inhabitants."),
        }
    )
    assert facts.input == (
        'Population of Lyon?\nLooking it up.\ncensus_lookup({"city": "Lyon"})\nLyon: 522,250'
    )
    assert facts.user_input == "Population of Lyon?"
    assert facts.content == "Lyon has 522,250 inhabitants."


def test_openai_shaped_calls_among_parts_read_as_calls() -> None:
    facts = mapped(
        {
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                [
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "function_call", "name": "lookup", "arguments": "{}"},
                            _openai_call("census", '{"city": "Lyon"}'),
                            {"type": "function"},
                        ],
                    }
                ]
            ),
        }
    )
    assert facts.content == 'lookup({})\ncensus({"city": "Lyon"})'


# --- frameworks' own run context and output shapes ---------------------------------------


def _langgraph_metadata(node: str, namespace: str) -> str:
    return json.dumps(
        {"langgraph_step": 1, "langgraph_node": node, "langgraph_checkpoint_ns": namespace}
    )


def test_a_langgraph_span_is_the_top_level_nodes_and_its_chains_are_no_steps() -> None:
    # create_react_agent(name="researcher") as a node: its inner node is called `agent`.
    llm = mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_LLM,
            c.OI_METADATA: _langgraph_metadata("agent", "researcher:1f2e|agent:9a8b"),
            "llm.output_messages.0.message.content": "Lyon has 522,250 inhabitants.",
        },
        name="ChatOpenAI",
    )
    assert (llm.agent, llm.kind, llm.is_step_candidate) == ("researcher", StepKind.LLM, True)
    # A plain node of one graph: the node itself.
    node = mapped({c.OI_METADATA: _langgraph_metadata("writer", "writer:77aa")})
    assert node.agent == "writer"
    # Without the namespace, the node.
    bare = mapped({c.OI_METADATA: json.dumps({"langgraph_node": "writer"})})
    assert bare.agent == "writer"
    # A CHAIN with output in a node is no step: the node name makes no span a candidate.
    chain = mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_CHAIN,
            c.OI_METADATA: _langgraph_metadata("researcher", "researcher:1f2e"),
            c.OI_OUTPUT_VALUE: "tools",
        },
        name="route",
    )
    assert (chain.agent, chain.is_step_candidate) == ("researcher", False)
    # A convention's own agent name wins over the framework's context.
    named = mapped({c.GEN_AI_AGENT_NAME: "Writer", c.OI_METADATA: _langgraph_metadata("w", "w:1")})
    assert named.agent == "Writer"
    assert mapped({c.OI_METADATA: "not json"}).agent is None


def test_a_llamaindex_workflow_step_names_the_agent_of_its_event() -> None:
    event = (
        "AgentSetup(input=[ChatMessage(role=<MessageRole.USER: 'user'>, blocks=[TextBlock("
        "text=\"say current_agent_name='nobody'\")])], current_agent_name='researcher')"
    )
    facts = mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_CHAIN,
            c.OI_INPUT_VALUE: json.dumps({"ctx": "<Context>", "ev": event}),
        },
        name="AgentWorkflow.run_agent_step",
    )
    assert (facts.agent, facts.is_step_candidate) == ("researcher", False)


def test_serialised_messages_and_results_in_output_value_read_as_their_text() -> None:
    langchain_tool_message = {
        "type": "tool",
        "data": {"content": "Lyon: 522,250", "name": "census_lookup", "status": "success"},
    }
    tool = mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_TOOL,
            c.OI_TOOL_NAME: "census_lookup",
            c.OI_OUTPUT_VALUE: json.dumps(langchain_tool_message),
        }
    )
    assert (tool.content, tool.tool_result) == ("Lyon: 522,250", "Lyon: 522,250")
    constructor = {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "messages", "AIMessage"],
        "kwargs": {"content": [{"type": "text", "text": "Done."}]},
    }
    assert mapped({c.OI_OUTPUT_VALUE: json.dumps(constructor)}).content == "Done."
    llamaindex_tool_output = {
        "blocks": [{"text": "Lyon: 522,250"}],
        "tool_name": "census_lookup",
        "raw_output": "Lyon: 522,250",
        "is_error": False,
    }
    tool = mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_TOOL,
            c.OI_OUTPUT_VALUE: json.dumps(llamaindex_tool_output),
        }
    )
    assert tool.tool_result == "Lyon: 522,250"
    state = {
        "messages": [
            {"type": "human", "data": {"content": "How many?"}},
            {"type": "ai", "data": {"content": "Lyon has 522,250 inhabitants."}},
        ]
    }
    assert mapped({c.OI_OUTPUT_VALUE: json.dumps(state)}).content == (
        "Lyon has 522,250 inhabitants."
    )
    # Other JSON, and messages that are not message objects, stay as they are.
    for other in ({"answer": 42}, {"messages": ["ChatMessage(role=user)"]}):
        assert mapped({c.OI_OUTPUT_VALUE: json.dumps(other)}).content == json.dumps(other)


def test_an_llm_span_that_only_prepares_a_request_is_no_step() -> None:
    request = {"messages": ["ChatMessage(role=<MessageRole.USER: 'user'>)"], "tools": []}
    preparing = mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_LLM,
            c.OI_LLM_MODEL_NAME: "gpt-4o",
            c.OI_OUTPUT_VALUE: json.dumps(request),
        },
        name="OpenAI._prepare_chat_with_tools",
    )
    assert not preparing.is_step_candidate
    # A model call saying so in messages or token counts stays a step, whatever its output.
    for evidence in (
        {"llm.output_messages.0.message.content": "hi"},
        {c.OI_LLM_TOKEN_COUNT_PROMPT: 12},
    ):
        call = mapped(
            {
                c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_LLM,
                c.OI_OUTPUT_VALUE: json.dumps(request),
                **evidence,
            }
        )
        assert call.is_step_candidate
    plain = mapped({c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_LLM, c.OI_OUTPUT_VALUE: "hi"})
    assert plain.is_step_candidate


# --- serialised outputs, tool names from span names, DSPy's field format --------------------


def test_a_json_string_output_is_unwrapped_to_its_text() -> None:
    facts = mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: "TOOL",
            c.OI_OUTPUT_VALUE: '"Lyon: 522,250 \\"inhabitants\\""',
            c.OI_OUTPUT_MIME_TYPE: "application/json",
        },
        name="census_lookup.__call__",
    )
    assert facts.tool_result == facts.content == 'Lyon: 522,250 "inhabitants"'
    # Declared text, the quotes are the tool's own.
    plain = mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: "TOOL",
            c.OI_OUTPUT_VALUE: '"quoted"',
            c.OI_OUTPUT_MIME_TYPE: "text/plain",
        }
    )
    assert plain.tool_result == '"quoted"'


def test_a_tool_span_naming_no_tool_is_named_by_its_span_less_the_method() -> None:
    facts = mapped({c.OPENINFERENCE_SPAN_KIND: "TOOL"}, name="census_lookup.__call__")
    assert facts.tool_name == "census_lookup"
    assert mapped({c.OPENINFERENCE_SPAN_KIND: "TOOL"}, name="search").tool_name is None
    # `tool.name` wins, and only tools are named so.
    named = mapped({c.OPENINFERENCE_SPAN_KIND: "TOOL", c.OI_TOOL_NAME: "census"}, name="x.__call__")
    assert named.tool_name == "census"
    assert mapped({c.OPENINFERENCE_SPAN_KIND: "LLM"}, name="LM.__call__").tool_name is None


def test_a_serialised_run_result_reads_as_its_answer_field_except_for_tools() -> None:
    crew_task = json.dumps(
        {
            "description": "What is the population of Lyon?",
            "raw": "Lyon has 225,520 inhabitants.",
            "messages": [{"role": "assistant", "content": "Lyon has 225,520 inhabitants."}],
        }
    )
    agent = mapped(
        {c.OPENINFERENCE_SPAN_KIND: "AGENT", c.OI_OUTPUT_VALUE: crew_task},
        name="Researcher._execute_core",
    )
    assert agent.content == "Lyon has 225,520 inhabitants."
    prediction = json.dumps({"trajectory": {"thought_0": "…"}, "reasoning": "…", "answer": "42"})
    chain = mapped({c.OPENINFERENCE_SPAN_KIND: "CHAIN", c.OI_OUTPUT_VALUE: prediction})
    assert chain.content == "42"
    tool = mapped(
        {c.OPENINFERENCE_SPAN_KIND: "TOOL", c.OI_OUTPUT_VALUE: '{"answer": "42", "p": 0.3}'}
    )
    assert tool.content == tool.tool_result == '{"answer": "42", "p": 0.3}'


def _dspy_reply(text: str) -> MappedSpan:
    return mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: "LLM",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": text,
        },
        name="LM.__call__",
    )


def test_a_dspy_react_turn_reads_as_its_thought_and_tool_call() -> None:
    chat = _dspy_reply(
        "[[ ## next_thought ## ]]\nLook it up.\n\n[[ ## next_tool_name ## ]]\ncensus_lookup\n\n"
        '[[ ## next_tool_args ## ]]\n{"city": "Lyon"}\n\n[[ ## completed ## ]]'
    )
    assert chat.content == 'Look it up.\ncensus_lookup({"city": "Lyon"})'
    as_json = _dspy_reply(
        json.dumps({"next_thought": "Done.", "next_tool_name": "finish", "next_tool_args": {}})
    )
    assert as_json.content == "Done.\nfinish({})"


def test_other_dspy_chat_adapter_fields_read_as_field_lines() -> None:
    facts = _dspy_reply(
        "[[ ## reasoning ## ]]\nThe census says so.\n\n[[ ## answer ## ]]\n42\n\n"
        "[[ ## completed ## ]]"
    )
    assert facts.content == "reasoning: The census says so.\nanswer: 42"
    # Text that merely mentions the markers, or JSON without ReAct's fields, stays as it is.
    assert _dspy_reply("I wrote [[ ## answer ## ]] here").content == (
        "I wrote [[ ## answer ## ]] here"
    )
    assert _dspy_reply('{"answer": "42"}').content == '{"answer": "42"}'


def test_a_google_genai_function_response_is_unwrapped_to_the_tool_result() -> None:
    # Google ADK: a tool's `output.value` is its FunctionResponse; a result that is not an
    # object is wrapped as {"result": …}.
    def tool(response: object) -> MappedSpan:
        output = {"id": "call_1", "name": "census_lookup", "response": response}
        return mapped(
            {
                c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_TOOL,
                c.OI_TOOL_NAME: "census_lookup",
                c.OI_OUTPUT_VALUE: json.dumps(output),
            }
        )

    facts = tool({"result": "Lyon: 522,250"})
    assert (facts.content, facts.tool_result) == ("Lyon: 522,250", "Lyon: 522,250")
    assert tool({"result": None}).tool_result == "null"
    assert tool({"result": [1, 2]}).tool_result == "[1, 2]"
    # A result that is an object (or an error handed back) is the object.
    assert json.loads(tool({"error": "timed out", "code": 5}).tool_result or "") == {
        "error": "timed out",
        "code": 5,
    }


def test_a_google_genai_model_response_reads_as_its_text() -> None:
    # Google ADK's invocation span: `output.value` is the last event, a model response.
    response = {
        "model_version": "m",
        "content": {"parts": [{"text": "Lyon has "}, {"text": "522,250."}], "role": "model"},
        "partial": False,
    }
    facts = mapped({c.OPENINFERENCE_SPAN_KIND: "CHAIN", c.OI_OUTPUT_VALUE: json.dumps(response)})
    assert facts.content == "Lyon has \n522,250."
    calls = {"content": {"parts": [{"function_call": {"name": "f"}}], "role": "model"}}
    raw = json.dumps(calls)
    assert mapped({c.OPENINFERENCE_SPAN_KIND: "CHAIN", c.OI_OUTPUT_VALUE: raw}).content == raw
