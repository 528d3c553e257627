"""A benchmark trajectory as OpenTelemetry spans: one root span for the run and one child
per step, with the GenAI and faultfinder attributes the sidecar reads back."""

from __future__ import annotations

import json
import time
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.trace import Status, StatusCode, Tracer

from faultfinder import conventions as c
from faultfinder.attributors.model import Step, StepKind, StepStatus, Trajectory
from faultfinder.datasets import BenchmarkRecord

STEP_NS = 1_000_000
"""Replayed steps start 1 ms apart, so time order equals step order."""

# Who&When subsets come from two agent frameworks (see the dataset's SOURCE.md).
_SUBSET_FRAMEWORK = {"algorithm-generated": "ag2", "hand-crafted": "magentic-one"}

_MESSAGE_ROLE = {
    StepKind.HUMAN: "user",
    StepKind.SYSTEM: "system",
    StepKind.TOOL: "tool",
}


def _utf8(text: str) -> str:
    # Protobuf strings must be valid UTF-8; a lone surrogate would fail the whole batch.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def output_messages(role: str, content: str) -> str:
    """GenAI-semconv `gen_ai.output.messages` JSON holding `content` as one text part."""
    messages = [{"role": role, "parts": [{"type": "text", "content": content}]}]
    text = json.dumps(messages, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # \u escapes keep a lone surrogate intact for any JSON reader.
        return json.dumps(messages, ensure_ascii=True)
    return text


_STEP_OPERATION: dict[StepKind, str | None] = {
    StepKind.MESSAGE: c.OP_INVOKE_AGENT,
    StepKind.HANDOFF: c.OP_INVOKE_AGENT,
    StepKind.LLM: c.OP_CHAT,
    StepKind.TOOL: c.OP_EXECUTE_TOOL,
    # GenAI semconv has no operation for a human or system turn; STEP_KIND says it.
    StepKind.HUMAN: None,
    StepKind.SYSTEM: None,
}


def _step_span_name(step: Step, operation: str | None) -> str:
    if operation == c.OP_EXECUTE_TOOL:
        return f"{operation} {step.tool_name or step.agent}"
    return f"{operation or step.kind.value} {step.agent}"


def step_attributes(step: Step) -> dict[str, Any]:
    """Span attributes of one replayed step."""
    attributes: dict[str, Any] = {
        c.STEP_INDEX: step.index,
        c.STEP_KIND: step.kind.value,
        c.GEN_AI_AGENT_NAME: _utf8(step.agent),
        c.GEN_AI_OUTPUT_MESSAGES: output_messages(
            _MESSAGE_ROLE.get(step.kind, "assistant"), step.content
        ),
    }
    operation = _STEP_OPERATION.get(step.kind, c.OP_INVOKE_AGENT)
    if operation is not None:
        attributes[c.GEN_AI_OPERATION_NAME] = operation
    if step.role is not None:
        attributes[c.STEP_ROLE] = _utf8(step.role)
    if step.tool_name is not None:
        attributes[c.GEN_AI_TOOL_NAME] = _utf8(step.tool_name)
    if step.tool_arguments is not None:
        attributes[c.GEN_AI_TOOL_CALL_ARGUMENTS] = _utf8(step.tool_arguments)
    if step.tool_result is not None:
        attributes[c.GEN_AI_TOOL_CALL_RESULT] = _utf8(step.tool_result)
    return attributes


def _root_attributes(record: BenchmarkRecord | None, trajectory: Trajectory) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_WORKFLOW,
        c.RUN_TASK: _utf8(trajectory.task),
        c.RUN_OUTCOME: "failure",
    }
    if trajectory.ground_truth is not None:
        attributes[c.RUN_GROUND_TRUTH] = _utf8(trajectory.ground_truth)
    if trajectory.final_answer:
        attributes[c.RUN_FINAL_ANSWER] = _utf8(trajectory.final_answer)
    framework = trajectory.metadata.get("framework")
    if framework is None and record is not None:
        framework = _SUBSET_FRAMEWORK.get(record.subset)
    if framework:
        attributes[c.RUN_FRAMEWORK] = str(framework)
    if record is not None:
        attributes[c.DATASET_NAME] = record.dataset
        attributes[c.DATASET_RECORD] = record.record_id
        attributes[c.LABEL_AGENT] = _utf8(record.gold.agent)
        attributes[c.LABEL_STEP] = record.gold.step
        attributes[c.LABEL_REASON] = _utf8(record.gold.reason)
    return attributes


def trajectory_spans(
    record_or_trajectory: BenchmarkRecord | Trajectory,
    tracer: Tracer,
    *,
    start_ns: int | None = None,
) -> int:
    """Record one run as spans on `tracer`: a root span and one child per step, in order.

    Steps get explicit timestamps `STEP_NS` apart from `start_ns` (default: so that the
    root ends now); the root span ends after every step. Returns the number of spans.
    """
    if isinstance(record_or_trajectory, BenchmarkRecord):
        record: BenchmarkRecord | None = record_or_trajectory
        trajectory = record_or_trajectory.trajectory
        run_name = f"{record_or_trajectory.dataset}/{record_or_trajectory.record_id}"
    else:
        record, trajectory = None, record_or_trajectory
        run_name = trajectory.run_id
    steps = trajectory.steps
    base = start_ns if start_ns is not None else time.time_ns() - (len(steps) + 2) * STEP_NS

    root = tracer.start_span(
        f"run {run_name}",
        context=Context(),  # a fresh trace, whatever span is current
        attributes=_root_attributes(record, trajectory),
        start_time=base,
    )
    parent = trace_api.set_span_in_context(root, Context())
    for step in steps:
        step_start = base + (step.index + 1) * STEP_NS
        attributes = step_attributes(step)
        span = tracer.start_span(
            _step_span_name(step, attributes.get(c.GEN_AI_OPERATION_NAME)),
            context=parent,
            attributes=attributes,
            start_time=step_start,
        )
        if step.status is StepStatus.ERROR:
            span.set_status(Status(StatusCode.ERROR, step.error or None))
        elif step.status is StepStatus.OK:
            span.set_status(Status(StatusCode.OK))
        span.end(end_time=step_start + STEP_NS // 2)
    # The status description deliberately carries no gold label: attributors may read it.
    root.set_status(Status(StatusCode.ERROR, "run failed: the final answer was judged incorrect"))
    root.end(end_time=base + (len(steps) + 1) * STEP_NS)
    return len(steps) + 1
