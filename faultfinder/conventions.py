"""Every span attribute name faultfinder reads or writes.

Three dialects are understood at ingest, in this priority order: faultfinder's own
names (below, under the `faultfinder.` prefix, only where the standards are silent),
the OpenTelemetry GenAI semantic conventions, and OpenInference.
"""

from typing import Final

# --- faultfinder's own (a thin superset where the standards say nothing) -------------

RUN_ID: Final = "faultfinder.run.id"
"""Overrides the run a span belongs to (default: its trace id)."""
RUN_TASK: Final = "faultfinder.run.task"
"""The task or query the run was asked to solve (on the root span)."""
RUN_OUTCOME: Final = "faultfinder.run.outcome"
"""`success` or `failure`: the run's verdict, on the root span or posted later."""
RUN_OUTCOME_REASON: Final = "faultfinder.run.outcome_reason"
"""Why the run failed, when known (a grader's message)."""
RUN_GROUND_TRUTH: Final = "faultfinder.run.ground_truth"
"""The correct answer to the task, when known."""
RUN_FINAL_ANSWER: Final = "faultfinder.run.final_answer"
"""The answer the run produced."""
RUN_FRAMEWORK: Final = "faultfinder.run.framework"
"""The agent framework that produced the run (e.g. `magentic-one`, `ag2`)."""
RUN_SIMULATED_USER: Final = "faultfinder.run.simulated_user"
"""`true` when the run's user is simulated and part of the system under test (an
evaluation harness's user simulator, as in τ-bench): the user's turns may then be blamed."""
RUN_USER_INSTRUCTION: Final = "faultfinder.run.user_instruction"
"""The simulated user's own instructions (what it was told to want and to know; τ-bench's
`instruction`): a user turn that withholds what they give it may then be blamed."""

STEP_INDEX: Final = "faultfinder.step.index"
"""Explicit 0-based position of the step in its run; wins over time order."""
STEP_KIND: Final = "faultfinder.step.kind"
"""One of message, llm, tool, handoff, human, system."""
STEP_ROLE: Final = "faultfinder.step.role"
"""The source's own role label for the step, e.g. `Orchestrator (thought)`."""
STEP_CONTENT: Final = "faultfinder.step.content"
"""The step's text when no standard attribute carries it."""

LABEL_AGENT: Final = "faultfinder.label.agent"
"""Gold label: the agent responsible for the failure (benchmarks, human review)."""
LABEL_STEP: Final = "faultfinder.label.step"
"""Gold label: the 0-based decisive step."""
LABEL_REASON: Final = "faultfinder.label.reason"
"""Gold label: why that step is decisive."""

DATASET_NAME: Final = "faultfinder.dataset.name"
"""Benchmark dataset a replayed run comes from (e.g. `who_and_when`)."""
DATASET_RECORD: Final = "faultfinder.dataset.record"
"""Benchmark record id of a replayed run (e.g. `algorithm-generated/1`)."""

PROJECT_NAME: Final = "faultfinder.project.name"
"""Resource attribute naming the project; the `x-project-name` header wins."""
PROJECT_HEADER: Final = "x-project-name"
"""HTTP/gRPC metadata header naming the project."""

# --- OpenTelemetry GenAI semantic conventions ----------------------------------------

GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
"""invoke_agent, create_agent, execute_tool, chat, text_completion, embeddings, ..."""
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
"""Human-readable name of the agent."""
GEN_AI_AGENT_ID: Final = "gen_ai.agent.id"
"""Unique id of the agent."""
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
"""Groups the spans of one conversation (session) across traces."""
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
"""JSON list of input messages `[{role, parts: [{type, content}]}]`."""
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
"""JSON list of output messages `[{role, parts: [{type, content}], finish_reason}]`."""
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
"""JSON list of system instruction parts."""
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
"""Why the model stopped, one reason per choice (`stop`, `tool_calls`, …)."""
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
"""Name of the tool executed."""
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
"""Id of the tool call."""
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
"""Arguments passed to the tool (JSON string)."""
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
"""Result returned by the tool."""
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
"""Model requested."""
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
"""Prompt tokens used."""
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
"""Completion tokens used."""
ERROR_TYPE: Final = "error.type"
"""Class of error the operation ended with."""

# Values of gen_ai.operation.name
OP_INVOKE_AGENT: Final = "invoke_agent"
OP_CREATE_AGENT: Final = "create_agent"
OP_EXECUTE_TOOL: Final = "execute_tool"
OP_CHAT: Final = "chat"
OP_TEXT_COMPLETION: Final = "text_completion"
OP_GENERATE_CONTENT: Final = "generate_content"
OP_INVOKE_WORKFLOW: Final = "invoke_workflow"

# --- OpenInference -------------------------------------------------------------------

OPENINFERENCE_SPAN_KIND: Final = "openinference.span.kind"
"""AGENT, CHAIN, LLM, TOOL, RETRIEVER, EMBEDDING, RERANKER, GUARDRAIL, EVALUATOR."""
OI_AGENT_NAME: Final = "agent.name"
"""Name of the agent the span belongs to."""
OI_GRAPH_NODE_ID: Final = "graph.node.id"
"""Node id in an agent graph (LangGraph and friends)."""
OI_INPUT_VALUE: Final = "input.value"
"""Input of the span as text or JSON."""
OI_OUTPUT_VALUE: Final = "output.value"
"""Output of the span as text or JSON."""
OI_OUTPUT_MIME_TYPE: Final = "output.mime_type"
"""OpenInference: `text/plain` or `application/json` (then `output.value` is JSON)."""
OI_LLM_INPUT_MESSAGES: Final = "llm.input_messages"
"""Prefix: `llm.input_messages.N.message.role` / `.content`."""
OI_LLM_OUTPUT_MESSAGES: Final = "llm.output_messages"
"""Prefix: `llm.output_messages.N.message.role` / `.content`."""
OI_TOOL_NAME: Final = "tool.name"
"""Name of the tool."""
OI_TOOL_PARAMETERS: Final = "tool.parameters"
"""Tool parameters (JSON)."""
OI_SESSION_ID: Final = "session.id"
"""Session id grouping traces."""

# Values of openinference.span.kind
OI_KIND_AGENT: Final = "AGENT"
OI_KIND_CHAIN: Final = "CHAIN"
OI_KIND_LLM: Final = "LLM"
OI_KIND_TOOL: Final = "TOOL"
OI_KIND_RETRIEVER: Final = "RETRIEVER"
OI_KIND_RERANKER: Final = "RERANKER"
OI_KIND_EMBEDDING: Final = "EMBEDDING"
OI_KIND_GUARDRAIL: Final = "GUARDRAIL"
OI_KIND_EVALUATOR: Final = "EVALUATOR"

OI_MESSAGE_ROLE: Final = "message.role"
"""Suffix after `llm.input_messages.N.` / `llm.output_messages.N.`: the message's role."""
OI_MESSAGE_NAME: Final = "message.name"
"""Suffix after `llm.*_messages.N.`: the name of the participant who wrote the message."""
OI_MESSAGE_CONTENT: Final = "message.content"
"""Suffix after `llm.*_messages.N.`: the message's text."""
OI_MESSAGE_CONTENTS: Final = "message.contents"
"""Prefix after `llm.*_messages.N.`: multimodal parts, `.M.message_content.text` / `.type`."""
OI_MESSAGE_CONTENT_TEXT: Final = "message_content.text"
"""Suffix after `message.contents.M.`: the text of one multimodal part."""
OI_MESSAGE_TOOL_CALLS: Final = "message.tool_calls"
"""Prefix after `llm.*_messages.N.`: `.M.tool_call.function.name` / `.arguments`."""
OI_TOOL_CALL_FUNCTION_NAME: Final = "tool_call.function.name"
"""Suffix after `message.tool_calls.M.`: the called function's name."""
OI_TOOL_CALL_FUNCTION_ARGUMENTS: Final = "tool_call.function.arguments"
"""Suffix after `message.tool_calls.M.`: the call's arguments (JSON)."""
OI_TOOL_CALL_ID: Final = "tool_call.id"
"""Suffix after `message.tool_calls.M.`: the call's id, which its tool's report names."""
OI_MESSAGE_TOOL_CALL_ID: Final = "message.tool_call_id"
"""Suffix after `llm.*_messages.N.`: on a tool's report, the id of the call it answers."""
OI_LLM_MODEL_NAME: Final = "llm.model_name"
"""Model used for an LLM span."""

# --- OpenTelemetry general semantic conventions --------------------------------------

SERVICE_NAME: Final = "service.name"
"""Resource attribute: the logical name of the service that sent the spans."""
EXCEPTION_EVENT: Final = "exception"
"""Name of the span event that records an exception."""
EXCEPTION_TYPE: Final = "exception.type"
"""Exception event attribute: the exception's class."""
EXCEPTION_MESSAGE: Final = "exception.message"
"""Exception event attribute: the exception's message."""
OI_PROJECT_NAME: Final = "openinference.project.name"
"""Resource attribute naming the project in OpenInference receivers (e.g. Arize Phoenix)."""

# --- appended: SDK step helpers ------------------------------------------------------

HANDOFF_TARGET: Final = "faultfinder.handoff.target"
"""The agent a handoff step passes control to (the source is `gen_ai.agent.name`)."""

# Values of faultfinder.step.kind (the `StepKind` names, kept here so agents need no server code)
STEP_KIND_MESSAGE: Final = "message"
STEP_KIND_LLM: Final = "llm"
STEP_KIND_TOOL: Final = "tool"
STEP_KIND_HANDOFF: Final = "handoff"
STEP_KIND_HUMAN: Final = "human"
STEP_KIND_SYSTEM: Final = "system"

# --- appended: more OpenInference and pydantic-ai names read at ingest ---------------

OI_LLM_TOKEN_COUNT_PROMPT: Final = "llm.token_count.prompt"
"""OpenInference: prompt tokens of an LLM span (GenAI: `gen_ai.usage.input_tokens`)."""
OI_LLM_TOKEN_COUNT_COMPLETION: Final = "llm.token_count.completion"
"""OpenInference: completion tokens of an LLM span (GenAI: `gen_ai.usage.output_tokens`)."""

PYDANTIC_AI_FINAL_RESULT: Final = "final_result"
"""pydantic-ai: the output of an agent run, on its `invoke_agent` span (no GenAI name exists)."""
PYDANTIC_AI_TOOL_ARGUMENTS: Final = "tool_arguments"
"""pydantic-ai instrumentation version 2: a tool span's arguments (later versions use
`gen_ai.tool.call.arguments`)."""
PYDANTIC_AI_TOOL_RESPONSE: Final = "tool_response"
"""pydantic-ai instrumentation version 2: a tool span's result (later versions use
`gen_ai.tool.call.result`)."""

# --- appended: framework context read at ingest --------------------------------------

OI_METADATA: Final = "metadata"
"""OpenInference: the span's metadata as a JSON object (LangChain puts LangGraph's run
context here: `langgraph_node`, `langgraph_checkpoint_ns`)."""

CREWAI_CREW_TASKS: Final = "crew_tasks"
"""openinference-instrumentation-crewai: on a crew's kickoff span, its tasks as a JSON list
(`description`, `expected_output`, `agent_role`, …) in the order they run."""

# --- appended: Traceloop OpenLLMetry's own names read at ingest -----------------------

TRACELOOP_ASSOCIATION_PREFIX: Final = "traceloop.association.properties."
"""OpenLLMetry (`opentelemetry-instrumentation-langchain` and its siblings): the run's
metadata, one attribute per key (LangGraph's `langgraph_node`,
`langgraph_checkpoint_ns`, LangChain's `lc_agent_name`), where OpenInference writes one
`metadata` JSON object."""
TRACELOOP_ENTITY_OUTPUT: Final = "traceloop.entity.output"
"""OpenLLMetry: a workflow's, task's or tool's output as JSON (a LangGraph node's
`{"outputs": state}`)."""
TRACELOOP_TOOL_ARGUMENTS: Final = "tool.arguments"
"""opentelemetry-instrumentation-llamaindex (OpenLLMetry): a workflow's `call_tool` step's
arguments as JSON, beside `tool.name`."""
TRACELOOP_CREWAI_CREW_TASKS: Final = "crewai.crew.tasks"
"""opentelemetry-instrumentation-crewai (OpenLLMetry): a crew's tasks as a JSON list, as
OpenInference's `crew_tasks`."""
AGNO_TEAM_NAME: Final = "agno.team.name"
"""opentelemetry-instrumentation-agno (OpenLLMetry): an Agno Team's name, on the team's
run span, whose leader's model calls lie directly beneath it (OpenInference names the
team as an agent)."""

# --- appended: GenAI messages recorded as span events (faultfinder/reading/events.py) ------------

EVENT_GEN_AI_SYSTEM_MESSAGE: Final = "gen_ai.system.message"
"""Span event: one system message sent to the model (attribute `content`)."""
EVENT_GEN_AI_USER_MESSAGE: Final = "gen_ai.user.message"
"""Span event: one user message sent to the model (attribute `content`)."""
EVENT_GEN_AI_ASSISTANT_MESSAGE: Final = "gen_ai.assistant.message"
"""Span event: one earlier assistant message sent to the model (`content`, `tool_calls`)."""
EVENT_GEN_AI_TOOL_MESSAGE: Final = "gen_ai.tool.message"
"""Span event: one tool's report sent to the model (`content`, `id` of the call)."""
EVENT_GEN_AI_CHOICE: Final = "gen_ai.choice"
"""Span event: one answer of the model (`message`, `finish_reason`, `index`)."""
EVENT_GEN_AI_OPERATION_DETAILS: Final = "gen_ai.client.inference.operation.details"
"""Span event holding the message attributes (`gen_ai.input.messages`, …) off the span."""
EVENT_GEN_AI_CONTENT_PROMPT: Final = "gen_ai.content.prompt"
"""Span event of the oldest GenAI conventions: the prompt (attribute `gen_ai.prompt`)."""
EVENT_GEN_AI_CONTENT_COMPLETION: Final = "gen_ai.content.completion"
"""Span event of the oldest GenAI conventions: the answer (attribute `gen_ai.completion`)."""
GEN_AI_PROMPT: Final = "gen_ai.prompt"
"""Attribute of `gen_ai.content.prompt`: the prompt's text or messages as JSON."""
GEN_AI_COMPLETION: Final = "gen_ai.completion"
"""Attribute of `gen_ai.content.completion`: the answer's text or messages as JSON."""

# --- appended: Microsoft Agent Framework's own names read at ingest ---------------------

AGENT_FRAMEWORK_BUILD_SPAN: Final = "workflow.build"
"""Microsoft Agent Framework: the span recording a workflow being built, a trace of its
own (a root with no children) sent when the workflow is made, not when it runs."""
AGENT_FRAMEWORK_BUILD_STARTED: Final = "build.started"
"""Microsoft Agent Framework: the first event of the `workflow.build` span."""

# --- GenAI events received as OTLP log records (faultfinder/server/otlp/log_events.py) ---

LOG_EVENTS_SPAN: Final = "faultfinder.log_events"
"""The name (and a `true` attribute) of the span the sidecar makes of the GenAI log
records naming one span in one `/v1/logs` request: a child of that span holding them as
its events, folded into it when the run is assembled. Never sent by an agent."""
