"""Mapping the shapes frameworks write beside the standards: pydantic-ai's own names,
OpenAI-shaped messages, LangGraph's and LlamaIndex's run context, serialised outputs and
results, tools named by their span, DSPy's fields, Google GenAI's responses."""

from __future__ import annotations

import json
from typing import Any

from faultfinder import conventions as c
from faultfinder.attributors.model import StepKind
from faultfinder.reading.mapping import (
    MappedSpan,
)
from tests.otlp_helpers import (
    input_messages,
    mapped,
    output_messages,
)

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


def test_a_langchain_agents_own_name_wins_over_its_graphs_node() -> None:
    # LangChain's create_agent(name="assistant") puts `lc_agent_name` in the run config:
    # its model call runs in node `model`, which is no agent.
    metadata = {
        "lc_agent_name": "assistant",
        "langgraph_node": "model",
        "langgraph_checkpoint_ns": "model:05ee",
    }
    llm = mapped(
        {
            c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_LLM,
            c.OI_METADATA: json.dumps(metadata),
            "llm.output_messages.0.message.content": "Your flight is booked.",
        }
    )
    assert (llm.agent, llm.agent_from_context) == ("assistant", True)
    blank = mapped({c.OI_METADATA: json.dumps({**metadata, "lc_agent_name": " "})})
    assert blank.agent == "model"


def _state(*messages: dict[str, Any]) -> str:
    return json.dumps({"messages": list(messages)})


def test_a_langgraph_nodes_replies_name_their_author() -> None:
    # create_react_agent(name="assistant") names each reply of its `agent` node.
    def reply(name: str | None) -> dict[str, Any]:
        return {"type": "ai", "data": {"content": "", "type": "ai", "name": name}}

    tool_message = {"type": "tool", "data": {"content": "found", "name": "lookup"}}
    node = {
        c.OPENINFERENCE_SPAN_KIND: c.OI_KIND_AGENT,
        c.OI_METADATA: _langgraph_metadata("agent", "agent:f501"),
    }
    named = mapped({**node, c.OI_OUTPUT_VALUE: _state(reply("assistant"), tool_message)})
    assert (named.agent, named.node_author) == ("agent", "assistant")
    constructor = {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "messages", "AIMessage"],
        "kwargs": {"content": "Done.", "name": "assistant"},
    }
    assert mapped({**node, c.OI_OUTPUT_VALUE: _state(constructor)}).node_author == "assistant"
    # No name, a tool's name only, two authors, or no node: no author.
    for output in (
        _state(reply(None)),
        _state(tool_message),
        _state(reply("researcher"), reply("writer")),
        json.dumps(reply("assistant")),
    ):
        assert mapped({**node, c.OI_OUTPUT_VALUE: output}).node_author is None
    outside = mapped({c.OI_OUTPUT_VALUE: _state(reply("assistant"))})
    assert (outside.agent, outside.node_author) == (None, None)
    # An agent a convention names is no node's.
    convention = mapped(
        {**node, c.OI_AGENT_NAME: "Booker", c.OI_OUTPUT_VALUE: _state(reply("assistant"))}
    )
    assert (convention.agent, convention.agent_from_context, convention.node_author) == (
        "Booker",
        False,
        None,
    )


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


def test_an_agno_teams_run_names_its_leader_for_the_model_calls_beneath() -> None:
    # opentelemetry-instrumentation-agno (OpenLLMetry): the team's span says only its name.
    team = mapped(
        {"traceloop.span.kind": "workflow", c.AGNO_TEAM_NAME: "coordinator"},
        name="coordinator.team",
    )
    assert (team.agent, team.is_step_candidate) == ("coordinator", False)
