"""Convention mapping of real SDK spans in each dialect: faultfinder, GenAI, OpenInference,
and which wins when a span speaks several."""

from __future__ import annotations

import json

from faultfinder import conventions as c
from faultfinder.attributors.learned import answerable_agents, can_be_blamed
from faultfinder.attributors.model import Step, StepKind, StepStatus
from faultfinder.reading.mapping import (
    map_span,
)
from tests.otlp_helpers import (
    MS,
    T0,
    SpanRecorder,
    input_messages,
    mapped,
    output_messages,
    span_records,
)

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


def test_an_empty_model_answer_is_blank_not_its_serialised_message() -> None:
    # As openinference-instrumentation-openai-agents records a model call that answered
    # nothing: no content attribute, `output.value` the chat-completions message list.
    empty = json.dumps([{"content": "", "refusal": None, "role": "assistant", "tool_calls": None}])
    facts = mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: "LLM",
            "llm.output_messages.0.message.role": "assistant",
            c.OI_OUTPUT_VALUE: empty,
            c.OI_OUTPUT_MIME_TYPE: "application/json",
        }
    )
    assert facts.kind is StepKind.LLM and facts.content == ""
    said = json.dumps([{"role": "assistant", "content": "Done."}])
    assert mapped({c.OPENINFERENCE_SPAN_KIND: "LLM", c.OI_OUTPUT_VALUE: said}).content == "Done."
    # A tool's JSON list that is no list of messages stays as it is.
    rows = json.dumps([{"flight": "HAT069"}, {"flight": "HAT136"}])
    tool = mapped(
        {c.OPENINFERENCE_SPAN_KIND: "TOOL", c.OI_TOOL_NAME: "search", c.OI_OUTPUT_VALUE: rows}
    )
    assert tool.tool_result == rows


def test_a_handoff_tool_marked_as_an_agent_span_is_the_tool_call_it_is() -> None:
    # As openinference-instrumentation-langchain records a tool named transfer_to_… run by
    # LangGraph's ToolNode: span kind AGENT, the tool's name, the node `tools` as context.
    facts = mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: "AGENT",
            c.OI_TOOL_NAME: "transfer_to_human_agents",
            c.OI_INPUT_VALUE: "The customer wants a refund for a cancelled flight.",
            c.OI_OUTPUT_VALUE: json.dumps(
                {"type": "tool", "data": {"content": "Transfer successful", "type": "tool"}}
            ),
            c.OI_METADATA: json.dumps({"langgraph_node": "tools"}),
        }
    )
    assert facts.kind is StepKind.TOOL
    assert (facts.tool_name, facts.tool_result) == (
        "transfer_to_human_agents",
        "Transfer successful",
    )
    # An agent span that names its agent stays the agent's turn.
    agent = mapped(
        {c.OPENINFERENCE_SPAN_KIND: "AGENT", c.OI_AGENT_NAME: "triage", c.OI_TOOL_NAME: "x"}
    )
    assert agent.kind is StepKind.MESSAGE and agent.agent == "triage"


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
