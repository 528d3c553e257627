"""Real OTLP request bodies for tests, built from spans recorded by the OpenTelemetry SDK.

`SpanRecorder` records finished spans in memory; `protobuf_body` / `json_body` encode
them exactly as an OTLP exporter would (JSON with hex ids and integer enums).
`trajectory_spans` records a replay-shaped run and `framework_spans` a nested
agent-framework run, for tests that need a realistic trace without writing one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from faultfinder import conventions as c
from faultfinder.attributors.model import Trajectory
from faultfinder.reading.mapping import MappedSpan, map_span
from faultfinder.reading.model import SpanRecord
from faultfinder.server.otlp.decode import decode_protobuf
from faultfinder.server.otlp.otlp_json import request_to_otlp_json

MS = 1_000_000
"""One millisecond in nanoseconds."""
T0 = 1_700_000_000_000_000_000
"""A fixed start time (2023-11-14) so recorded traces are reproducible."""


class SpanRecorder:
    """A TracerProvider whose finished spans stay in memory (`.spans`)."""

    def __init__(
        self,
        resource_attributes: Mapping[str, Any] | None = None,
        *,
        scope: str = "faultfinder.tests",
    ) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create(dict(resource_attributes or {})))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer(scope)

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.exporter.get_finished_spans())

    def span(
        self,
        name: str,
        *,
        parent: trace.Span | None = None,
        start: int,
        end: int,
        attributes: Mapping[str, Any] | None = None,
        error: str | None = None,
    ) -> trace.Span:
        """Record one finished span with explicit times; returns it to parent others."""
        context = trace.set_span_in_context(parent) if parent is not None else None
        span = self.tracer.start_span(
            name, context=context, start_time=start, attributes=dict(attributes or {})
        )
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end)
        return span


def export_request(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    """The ExportTraceServiceRequest the OTLP exporters send for `spans`."""
    return encode_spans(spans)


def mapped(
    attributes: Mapping[str, Any], *, name: str = "span", error: str | None = None
) -> MappedSpan:
    """Map one span recorded by the SDK with `attributes` and sent through OTLP."""
    recorder = SpanRecorder()
    recorder.span(name, start=T0, end=T0 + MS, attributes=attributes, error=error)
    (record,) = span_records(recorder.spans)
    return map_span(record)


def protobuf_body(spans: Sequence[ReadableSpan]) -> bytes:
    """An OTLP/HTTP protobuf request body."""
    body: bytes = export_request(spans).SerializeToString()
    return body


def json_body(spans: Sequence[ReadableSpan]) -> bytes:
    """An OTLP/JSON request body: camelCase, integer enums, hex trace and span ids."""
    return request_to_otlp_json(export_request(spans))


def span_records(spans: Sequence[ReadableSpan], *, project: str | None = None) -> list[SpanRecord]:
    """`spans` as the server sees them: encoded to OTLP protobuf and decoded again."""
    batch = decode_protobuf(protobuf_body(spans), project_header=project)
    assert batch.rejected == 0, batch.error_message
    return batch.spans


def output_messages(text: str, *, role: str = "assistant") -> str:
    """`gen_ai.output.messages` holding one text part."""
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def input_messages(*turns: tuple[str, str]) -> str:
    """`gen_ai.input.messages` from (role, text) pairs."""
    return json.dumps(
        [{"role": role, "parts": [{"type": "text", "content": text}]} for role, text in turns]
    )


def trajectory_spans(
    trajectory: Trajectory,
    *,
    resource_attributes: Mapping[str, Any] | None = None,
    root_attributes: Mapping[str, Any] | None = None,
    same_times: bool = False,
    run_id: str | None = None,
) -> tuple[ReadableSpan, ...]:
    """A replay-shaped trace of `trajectory`: one root span, one child span per step.

    With `run_id`, every span carries it as `faultfinder.run.id` (as the SDK's `run()`
    sets it); without, the run is the trace.

    Each step span carries `faultfinder.step.index`, `gen_ai.agent.name`, the content as
    `gen_ai.output.messages`, `faultfinder.step.kind` and (when set) `faultfinder.step.role`.
    Steps are 1 ms apart, or all at the same instant with `same_times` (so only the
    explicit index can order them).
    """
    recorder = SpanRecorder(resource_attributes)
    n = len(trajectory.steps)
    attributes: dict[str, Any] = {c.RUN_TASK: trajectory.task}
    if trajectory.ground_truth is not None:
        attributes[c.RUN_GROUND_TRUTH] = trajectory.ground_truth
    if trajectory.final_answer is not None:
        attributes[c.RUN_FINAL_ANSWER] = trajectory.final_answer
    attributes.update(root_attributes or {})
    if run_id is not None:
        attributes[c.RUN_ID] = run_id
    root = recorder.tracer.start_span("replay", start_time=T0, attributes=attributes)
    for step in trajectory.steps:
        start = T0 + MS if same_times else T0 + (step.index + 1) * MS
        step_attributes: dict[str, Any] = {
            c.STEP_INDEX: step.index,
            c.GEN_AI_AGENT_NAME: step.agent,
            c.GEN_AI_OUTPUT_MESSAGES: output_messages(step.content),
            c.STEP_KIND: step.kind.value,
        }
        if step.role is not None:
            step_attributes[c.STEP_ROLE] = step.role
        if run_id is not None:
            step_attributes[c.RUN_ID] = run_id
        recorder.span(
            f"step {step.index} {step.agent}",
            parent=root,
            start=start,
            end=start + MS // 2,
            attributes=step_attributes,
        )
    root.end(end_time=T0 + (n + 2) * MS)
    return recorder.spans


def framework_spans(
    resource_attributes: Mapping[str, Any] | None = None,
) -> tuple[ReadableSpan, ...]:
    """A GenAI-semconv trace as an agent framework emits it, with known expected steps.

    invoke_agent Orchestrator (task in its input, final answer in its output)
    ├── chat                      → step 0, LLM,  agent Orchestrator
    ├── invoke_agent WebSurfer
    │   ├── chat                  → step 1, LLM,  agent WebSurfer (output is a tool call)
    │   │   └── POST (HTTP span, no conventions: not a step, keeps `chat` a step)
    │   └── execute_tool web_search → step 2, TOOL, agent WebSurfer, result text
    └── execute_tool run_python   → step 3, TOOL, agent Orchestrator, status ERROR
    """
    recorder = SpanRecorder({c.SERVICE_NAME: "travel-agents", **(resource_attributes or {})})
    span = recorder.span
    tracer = recorder.tracer
    root = tracer.start_span(
        "invoke_agent Orchestrator",
        start_time=T0,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT,
            c.GEN_AI_AGENT_NAME: "Orchestrator",
            c.GEN_AI_INPUT_MESSAGES: input_messages(
                ("system", "You coordinate a team."), ("user", "Find the cheapest flight to Oslo.")
            ),
            c.GEN_AI_OUTPUT_MESSAGES: output_messages("The cheapest flight costs 120 EUR."),
        },
    )
    span(
        "chat gpt-4o",
        parent=root,
        start=T0 + 1 * MS,
        end=T0 + 2 * MS,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_REQUEST_MODEL: "gpt-4o",
            c.GEN_AI_OUTPUT_MESSAGES: output_messages("Ask WebSurfer to search flights."),
        },
    )
    surfer = tracer.start_span(
        "invoke_agent WebSurfer",
        context=trace.set_span_in_context(root),
        start_time=T0 + 3 * MS,
        attributes={c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: "WebSurfer"},
    )
    surfer_chat = tracer.start_span(
        "chat gpt-4o",
        context=trace.set_span_in_context(surfer),
        start_time=T0 + 4 * MS,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [
                            {
                                "type": "tool_call",
                                "name": "web_search",
                                "arguments": {"query": "flights Oslo"},
                            }
                        ],
                    }
                ]
            ),
        },
    )
    span("POST", parent=surfer_chat, start=T0 + 4 * MS + 10, end=T0 + 5 * MS - 10)
    surfer_chat.end(end_time=T0 + 5 * MS)
    span(
        "execute_tool web_search",
        parent=surfer,
        start=T0 + 6 * MS,
        end=T0 + 7 * MS,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
            c.GEN_AI_TOOL_NAME: "web_search",
            c.GEN_AI_TOOL_CALL_ARGUMENTS: '{"query": "flights Oslo"}',
            c.GEN_AI_TOOL_CALL_RESULT: "SAS 120 EUR; Norwegian 135 EUR",
        },
    )
    surfer.end(end_time=T0 + 8 * MS)
    span(
        "execute_tool run_python",
        parent=root,
        start=T0 + 9 * MS,
        end=T0 + 10 * MS,
        attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
            c.GEN_AI_TOOL_NAME: "run_python",
            c.ERROR_TYPE: "TimeoutError",
        },
        error="python timed out after 10 s",
    )
    root.end(end_time=T0 + 11 * MS)
    return recorder.spans
