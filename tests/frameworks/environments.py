"""The frameworks of the conformance suite: what each environment installs, which module
tests it, and what the sidecar reads of its spans. Plain data, read by noxfile.py (to
build the environments), by the conformance modules (to check the installed versions) and
by `matrix.py` (the README's compatibility matrix), so the three cannot disagree.

Frameworks pin dependencies that cannot share one environment (CrewAI protobuf 7,
autogen-core protobuf 5.29), so each framework gets its own.

What an entry says (`Framework`) and the phrases several entries share are in
`framework`.
"""

from __future__ import annotations

from dataclasses import replace

from tests.frameworks.framework import (
    COMMON,
    FED_BACK,
    MESSAGES,
    MODEL_500,
    SPAN_KIND,
    TOOL_CALLS,
    TOOL_NAME,
    Framework,
)

__all__ = ["COMMON", "FRAMEWORKS", "Framework", "by_name"]

CREWAI = Framework(
    name="crewai",
    module="test_crewai.py",
    packages=("crewai==1.15.30",),
    instrumentation=("openinference-instrumentation-crewai==1.1.21",),
    reads=(
        SPAN_KIND,
        "graph.node.id (the agent's role)",
        "crew_tasks (the first task's description)",
        "input.value / output.value (`raw`)",
        TOOL_NAME,
    ),
    scenarios=("researcher (tool) + writer, two sequential tasks", MODEL_500, FED_BACK),
)

OPENAI_AGENTS = Framework(
    name="openai-agents",
    module="test_openai_agents.py",
    packages=("openai-agents==0.24.0",),
    instrumentation=("openinference-instrumentation-openai-agents==2.6.0",),
    extra=("openai>=1.50",),
    reads=(
        SPAN_KIND,
        "agent.name",
        "llm.input_messages / llm.output_messages (flattened, tool_calls)",
        "tool.name, input.value / output.value",
        "the last model reply (the trace's root carries no output)",
    ),
    scenarios=(
        "triage agent handing off to a specialist (function tool)",
        MODEL_500,
        "tool raises, escapes Runner.run",
        FED_BACK,
    ),
)

LANGGRAPH = Framework(
    name="langgraph",
    module="test_langgraph.py",
    packages=("langgraph==1.2.24", "langchain==1.5.2", "langchain-openai==1.8.1"),
    instrumentation=("openinference-instrumentation-langchain==0.1.80",),
    reads=(
        SPAN_KIND,
        "metadata (`lc_agent_name`, `langgraph_checkpoint_ns`, `langgraph_node`)",
        "a node's reply's author (`create_react_agent(name=…)`)",
        MESSAGES,
        "output.value (a LangChain message, a `messages` state)",
        TOOL_NAME,
    ),
    scenarios=(
        "StateGraph nodes with a ToolNode",
        "create_react_agent agents as nodes",
        "create_agent agents as a lead agent's tools",
        MODEL_500,
        "tool raises and escapes",
        FED_BACK,
    ),
)

LLAMAINDEX = Framework(
    name="llamaindex",
    module="test_llamaindex.py",
    packages=("llama-index-core==0.14.25", "llama-index-llms-openai-like==0.8.1"),
    instrumentation=("openinference-instrumentation-llama-index==4.6.1",),
    reads=(
        SPAN_KIND,
        "input.value (workflow event `current_agent_name`)",
        MESSAGES,
        "output.value (`ToolOutput` blocks; the reply in the workflow's `StopEvent`)",
        TOOL_NAME,
    ),
    scenarios=(
        "AgentWorkflow: two FunctionAgents, a tool and a handoff",
        MODEL_500,
        FED_BACK,
        "a multi-line answer, its stop event cut short",
    ),
)

AGNO = Framework(
    name="agno",
    module="test_agno.py",
    packages=("agno==3.1.10",),
    instrumentation=("openinference-instrumentation-agno==1.0.15",),
    # Agno's OpenAIChat model is the openai client's.
    extra=("openai>=1.50",),
    reads=(
        SPAN_KIND,
        "AGENT span name `<agent>.run` / agent.name",
        "input.value (the user's text)",
        TOOL_CALLS,
        "tool.name, output.value",
    ),
    scenarios=(
        "Team leader delegating to a member agent (function tool)",
        MODEL_500,
        FED_BACK,
    ),
)

OPENAI_CLIENT = Framework(
    name="openai-client",
    module="test_openai_client.py",
    packages=("openai==2.54.0",),
    instrumentation=("openinference-instrumentation-openai==0.1.66",),
    reads=(
        SPAN_KIND,
        "llm.input_messages / llm.output_messages (`tool_calls`)",
        "llm.input_messages: tool calls' reports (`tool_call.id`, `message.tool_call_id`)",
        "service.name (the agent: no span names one)",
    ),
    scenarios=("no framework: a hand-written tool loop on the openai client", MODEL_500, FED_BACK),
)

STRANDS = Framework(
    name="strands",
    module="test_strands.py",
    # The framework traces itself: no instrumentation package.
    packages=("strands-agents[openai]==1.62.0",),
    instrumentation=(),
    reads=(
        "gen_ai.operation.name (invoke_agent, chat, execute_tool)",
        "gen_ai.agent.name",
        "span events: gen_ai.user.message, gen_ai.assistant.message, gen_ai.tool.message,"
        " gen_ai.choice",
        "gen_ai.tool.name, gen_ai.tool.status",
    ),
    scenarios=(
        "Swarm: a researcher with a function tool handing off to a writer",
        "an agent called as another agent's tool",
        MODEL_500,
        FED_BACK,
    ),
)
"""Strands Agents traces itself (its spans on the global provider): no instrumentation
package. By default the messages are span events, one per message."""

FRAMEWORKS: tuple[Framework, ...] = (
    Framework(
        name="smolagents",
        module="test_smolagents.py",
        packages=("smolagents==1.26.0",),
        instrumentation=("openinference-instrumentation-smolagents==0.1.43",),
        extra=("openai>=1.50",),
        reads=(
            SPAN_KIND,
            "AGENT span name `<agent>.run`",
            "input.value (`task`)",
            "output.value",
            TOOL_NAME,
            TOOL_CALLS,
            "a managed agent's task (`You're a helpful agent named …`) when its span is lost",
        ),
        scenarios=(
            "manager + managed agent (tool-calling)",
            MODEL_500,
            FED_BACK,
            "an exception escaping both agents",
        ),
    ),
    CREWAI,
    replace(
        CREWAI,
        name="crewai+openai",
        # CrewAI calls OpenAI-compatible models through the openai client.
        instrumentation=(*CREWAI.instrumentation, "openinference-instrumentation-openai==0.1.66"),
        reads=(*CREWAI.reads, TOOL_CALLS),
    ),
    replace(
        CREWAI,
        name="crewai+openllmetry",
        # Traceloop's OpenLLMetry, as Traceloop.init() sets it up: CrewAI's and the
        # openai client's instrumentation.
        instrumentation=(
            "opentelemetry-instrumentation-crewai==0.62.4",
            "opentelemetry-instrumentation-openai==0.62.4",
        ),
        reads=(
            "gen_ai.operation.name (invoke_agent, chat), gen_ai.agent.name",
            "crewai.crew.tasks (the first task's description)",
            "gen_ai.output.messages (parts)",
            "gen_ai.input.messages: tool calls' reports (no tool span is recorded)",
        ),
    ),
    Framework(
        name="dspy",
        module="test_dspy.py",
        packages=("dspy==3.4.1",),
        # DSPy's instrumentation traces the LM calls itself (`LM.__call__`).
        instrumentation=("openinference-instrumentation-dspy==0.1.48",),
        reads=(
            SPAN_KIND,
            "root CHAIN span name `<module>.forward` (the agent)",
            "input.value (`input_args`)",
            "output.value (JSON strings, `answer`)",
            "ReAct fields `next_tool_name` / `next_tool_args` in the LM's text",
        ),
        scenarios=(
            "ReAct with a tool (ChatAdapter)",
            MODEL_500,
            FED_BACK,
        ),
    ),
    OPENAI_AGENTS,
    replace(
        OPENAI_AGENTS,
        name="openai-agents+openllmetry",
        # Traceloop's OpenLLMetry instrumentation instead of OpenInference's.
        # Both, as Traceloop.init() instruments them: the SDK's instrumentation alone
        # records no chat-completions model's output.
        instrumentation=(
            "opentelemetry-instrumentation-openai-agents==0.62.4",
            "opentelemetry-instrumentation-openai==0.62.4",
        ),
        reads=(
            "gen_ai.operation.name (invoke_agent, chat, execute_tool)",
            "gen_ai.agent.name",
            "gen_ai.input.messages / gen_ai.output.messages (parts)",
            "gen_ai.tool.name / gen_ai.tool.call.arguments / gen_ai.tool.call.result",
        ),
    ),
    Framework(
        name="google-adk",
        module="test_google_adk.py",
        packages=("google-adk==2.13.0",),
        instrumentation=("openinference-instrumentation-google-adk==1.0.5",),
        extra=("litellm==1.110.2",),
        reads=(
            SPAN_KIND,
            "agent.name / gen_ai.agent.name",
            "llm.output_messages (flattened, contents and tool_calls)",
            "tool.name / gen_ai.tool.name, output.value (function response)",
            "input.value (`new_message`)",
        ),
        scenarios=(
            "coordinator transferring to a sub-agent (function tool), LiteLLM",
            MODEL_500,
            "tool raises, ends the run",
            "tool raises, error fed back (on_tool_error_callback)",
        ),
    ),
    Framework(
        name="pydantic-ai",
        module="test_pydantic_ai.py",
        packages=("pydantic-ai-slim[openai]==2.68.0",),
        # pydantic-ai instruments itself (Agent.instrument_all): no separate package.
        instrumentation=(),
        reads=(
            "gen_ai.operation.name, gen_ai.agent.name",
            "gen_ai.input.messages / gen_ai.output.messages",
            "gen_ai.tool.name, tool_arguments / tool_response",
            "final_result",
        ),
        scenarios=(
            "orchestrator whose tool delegates to a second agent (function tool)",
            MODEL_500,
            "tool raises, ends the run",
            "tool raises, model retries (ModelRetry)",
        ),
    ),
    Framework(
        name="autogen-agentchat",
        module="test_autogen_agentchat.py",
        packages=("autogen-agentchat==0.7.5", "autogen-core==0.7.5", "autogen-ext==0.7.5"),
        instrumentation=("openinference-instrumentation-autogen-agentchat==0.1.22",),
        # The OpenAI model client (autogen-ext's `openai` extra).
        extra=("autogen-ext[openai]==0.7.5",),
        reads=(
            SPAN_KIND,
            "graph.node.id (the agent's name)",
            "input.value (`task`)",
            "output.value (the team's `messages`: the last one's text)",
            TOOL_NAME,
            TOOL_CALLS,
            "autogen-core's gen_ai.operation.name `invoke_agent` / `execute_tool` "
            "(one step with the instrumentation's tool span)",
        ),
        scenarios=(
            "round-robin team: researcher (tool) + writer",
            "building the team makes no run",
            MODEL_500,
            FED_BACK,
        ),
    ),
    Framework(
        name="ag2",
        module="test_ag2.py",
        packages=("ag2==1.2.1",),
        # AG2 traces itself: `ag2.middleware.TelemetryMiddleware` (GenAI conventions).
        instrumentation=(),
        extra=("ag2[openai,tracing]==1.2.1",),
        reads=(
            "gen_ai.operation.name (`invoke_agent`, `chat`, `execute_tool`)",
            "gen_ai.agent.name",
            "gen_ai.input.messages / gen_ai.output.messages (OpenAI-shaped, `tool_calls`)",
            "gen_ai.tool.name / gen_ai.tool.call.arguments / gen_ai.tool.call.result",
        ),
        scenarios=(
            "coordinator delegating to a researcher agent-as-tool (tool-calling)",
            MODEL_500,
            FED_BACK,
        ),
    ),
    LANGGRAPH,
    replace(
        LANGGRAPH,
        name="langgraph+openllmetry",
        # Traceloop's OpenLLMetry instrumentation instead of OpenInference's.
        instrumentation=("opentelemetry-instrumentation-langchain==0.62.4",),
        reads=(
            "gen_ai.operation.name (chat, execute_tool, invoke_agent; execute_task is no step)",
            "traceloop.association.properties.* (LangChain's metadata, one key each)",
            "traceloop.entity.output (a node's reply's author)",
            "gen_ai.input.messages / gen_ai.output.messages (parts)",
            "gen_ai.tool.call.arguments / .result (LangChain's callback arguments)",
        ),
    ),
    LLAMAINDEX,
    replace(
        LLAMAINDEX,
        name="llamaindex+openllmetry",
        # Traceloop's OpenLLMetry, as Traceloop.init() sets it up: the framework's and the
        # openai client's instrumentation.
        instrumentation=(
            "opentelemetry-instrumentation-llamaindex==0.62.4",
            "opentelemetry-instrumentation-openai==0.62.4",
        ),
        reads=(
            "gen_ai.operation.name (chat), gen_ai.input.messages / gen_ai.output.messages",
            "traceloop.entity.output (workflow events: `current_agent_name`, a tool call's"
            " `tool_output`)",
            "tool.name, tool.arguments",
        ),
    ),
    OPENAI_CLIENT,
    replace(
        OPENAI_CLIENT,
        name="openai-client+openllmetry",
        # Traceloop's OpenLLMetry instrumentation instead of OpenInference's.
        instrumentation=("opentelemetry-instrumentation-openai==0.62.4",),
        reads=(
            "gen_ai.operation.name (chat)",
            "gen_ai.input.messages / gen_ai.output.messages (parts)",
            "gen_ai.input.messages: tool calls' reports (`tool_call_response` parts)",
            "service.name (the agent: no span names one)",
        ),
    ),
    replace(
        OPENAI_CLIENT,
        name="openai-client+otel-genai",
        # OpenTelemetry's own GenAI instrumentation: messages as OTLP log records.
        # 2.4b0 imports `opentelemetry.util.genai.instruments`, which util-genai 1.2b0 and
        # 1.3b0 no longer have: the newest release of each does not import together.
        instrumentation=(
            "opentelemetry-instrumentation-openai-v2==2.4b0",
            "opentelemetry-util-genai==1.1b0",
        ),
        reads=(
            "gen_ai.operation.name (chat)",
            "OTLP log records (`/v1/logs`) naming their span:"
            " gen_ai.client.inference.operation.details (gen_ai.input.messages /"
            " gen_ai.output.messages)",
            "service.name (the agent: no span names one)",
        ),
    ),
    AGNO,
    replace(
        AGNO,
        name="agno+openllmetry",
        # Traceloop's OpenLLMetry, as Traceloop.init() sets it up: the framework's and the
        # openai client's instrumentation.
        instrumentation=(
            "opentelemetry-instrumentation-agno==0.62.4",
            "opentelemetry-instrumentation-openai==0.62.4",
        ),
        reads=(
            "agno.team.name (the team's leader), gen_ai.agent.name (a member)",
            "gen_ai.input.messages / gen_ai.output.messages (parts)",
            "gen_ai.input.messages: tool calls' reports (the tool spans carry only Agno's repr)",
        ),
    ),
    Framework(
        name="beeai",
        module="test_beeai.py",
        packages=("beeai-framework==0.1.85",),
        instrumentation=("openinference-instrumentation-beeai==0.1.30",),
        reads=(
            SPAN_KIND,
            "agent.name",
            "input.value (`input`)",
            "llm.output_messages.*.message.tool_calls (`final_answer`'s response)",
            "tool.name, output.value",
            "event spans (`metadata.path`) folded into their span",
        ),
        scenarios=(
            "RequirementAgent handing off to a second one (HandoffTool, function tool)",
            MODEL_500,
            FED_BACK,
        ),
    ),
    STRANDS,
    replace(
        STRANDS,
        name="strands+genai-latest",
        # Strands' opt-in to today's GenAI conventions: messages as GenAI parts in one
        # `gen_ai.client.inference.operation.details` event, tools' reports in the
        # user's role, a tool's result as content blocks in `gen_ai.tool.call.result`.
        reads=(
            "gen_ai.operation.name (invoke_agent, chat, execute_tool)",
            "gen_ai.agent.name",
            "span event gen_ai.client.inference.operation.details (gen_ai.input.messages,"
            " gen_ai.output.messages)",
            "gen_ai.tool.name, gen_ai.tool.call.arguments / .result (content blocks)",
        ),
    ),
    Framework(
        name="agent-framework",
        module="test_agent_framework.py",
        # Microsoft Agent Framework traces itself: no instrumentation package.
        packages=(
            "agent-framework-core==1.26.0",
            "agent-framework-openai==1.17.0",
            "agent-framework-orchestrations==1.4.0",
        ),
        instrumentation=(),
        reads=(
            "gen_ai.operation.name (invoke_workflow, invoke_agent, chat, execute_tool)",
            "gen_ai.agent.name",
            "gen_ai.input.messages / gen_ai.output.messages (parts)",
            "gen_ai.tool.name, gen_ai.tool.call.arguments / .result",
        ),
        scenarios=(
            "SequentialBuilder: a researcher with a function tool, then a writer",
            "an agent called as another agent's tool (`as_tool`)",
            MODEL_500,
            FED_BACK,
        ),
    ),
    Framework(
        name="semantic-kernel",
        module="test_semantic_kernel.py",
        # Semantic Kernel traces itself: no instrumentation package; its messages go to
        # Python's logging, sent on by OpenTelemetry's logging handler.
        packages=("semantic-kernel==1.45.0",),
        instrumentation=(),
        reads=(
            "gen_ai.operation.name (invoke_agent, chat, execute_tool)",
            "gen_ai.agent.name",
            "OTLP log records (`/v1/logs`) naming their span: event.name gen_ai.*.message /"
            " gen_ai.choice, JSON bodies",
            "gen_ai.tool.name, gen_ai.tool.call.arguments / .result",
        ),
        scenarios=(
            "ChatCompletionAgent calling another agent as a plugin (a census plugin)",
            MODEL_500,
            FED_BACK,
        ),
    ),
)


def by_name(name: str) -> Framework:
    for framework in FRAMEWORKS:
        if framework.name == name:
            return framework
    raise KeyError(f"no framework {name!r} in tests/frameworks/environments.py")
