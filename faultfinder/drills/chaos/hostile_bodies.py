"""The request bodies of the hostile drills (issue 28): bodies of the smallest spans the
sidecar accepts, a gzip bomb of them, long runs of agent steps sent in in-limit requests,
runs with hostile names, and long trajectories for `POST /api/attribute`."""

from __future__ import annotations

import gzip
import json
import os
import random
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Status, StatusCode

from faultfinder import conventions as c
from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.drills.otlp_traces import SpanBuilder

__all__ = [
    "MINIMAL_SPAN_BYTES",
    "RunOfSteps",
    "attribute_request",
    "failed_run_spans",
    "gzip_bomb",
    "minimal_spans_body",
    "minimal_spans_fitting",
    "named_run_body",
    "partial_success",
]

_SCOPE = InstrumentationScope("faultfinder.drills.chaos.hostile", "0.1.0")
_AGENTS = ("Planner", "Searcher", "Coder", "Checker")

MINIMAL_SPAN_BYTES = 30
"""Wire size of a span holding only its trace and span ids, with its field header."""
_WRAPPING_BYTES = 10
"""The request's resource_spans and scope_spans headers around the spans (up to 2**28
bytes of spans)."""


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _field_number(message: Any, name: str) -> int:
    number: int = message.DESCRIPTOR.fields_by_name[name].number
    return number


def minimal_spans_body(count: int, *, trace_id: bytes | None = None) -> bytes:
    """A protobuf `ExportTraceServiceRequest` of `count` spans that hold only a trace id
    and a span id (no name, no times: the smallest span the sidecar accepts, 30 bytes),
    all in one trace, span ids counting up from 1.

    Assembled on the wire rather than as `count` messages: the drills send millions of
    them, and counting ids compress as well as the issue's gzip body did.
    """
    trace_id = trace_id or os.urandom(16)
    template = Span(trace_id=trace_id, span_id=(1).to_bytes(8, "big")).SerializeToString()
    prefix = template[:-8]
    if template != prefix + (1).to_bytes(8, "big"):  # the span id is the last field written
        raise RuntimeError("unexpected protobuf layout of a minimal span")
    head = _varint(_field_number(ScopeSpans, "spans") << 3 | 2) + _varint(len(template))
    spans = b"".join(head + prefix + n.to_bytes(8, "big") for n in range(1, count + 1))
    resource_spans = _length_delimited(_field_number(ResourceSpans, "scope_spans"), spans)
    return _length_delimited(
        _field_number(ExportTraceServiceRequest, "resource_spans"), resource_spans
    )


def minimal_spans_fitting(size: int) -> int:
    """How many minimal spans fit in a body of at most `size` bytes."""
    return (size - _WRAPPING_BYTES) // MINIMAL_SPAN_BYTES


def gzip_bomb(inflated_bytes: int) -> bytes:
    """A gzip body that inflates to at most `inflated_bytes` of minimal spans (the issue's
    5.9 MB body held 64 MiB, 2.24 M spans)."""
    body = minimal_spans_body(minimal_spans_fitting(inflated_bytes))
    return gzip.compress(body, compresslevel=6)


def partial_success(body: bytes) -> tuple[int, str]:
    """Rejected spans and the message of an OTLP/HTTP protobuf success response."""
    if not body:
        return 0, ""
    response = ExportTraceServiceResponse.FromString(body)
    return response.partial_success.rejected_spans, response.partial_success.error_message


class RunOfSteps:
    """One run sent in several OTLP requests: a workflow root (in the first request) and
    agent steps under it, each a copy of SDK-encoded templates with its own span id."""

    def __init__(self, run_id: str, *, failed: bool = True, seed: int | None = None) -> None:
        self.run_id = run_id
        self._ids = random.Random(seed if seed is not None else os.urandom(16))
        builder = SpanBuilder(
            Resource.create({c.SERVICE_NAME: "faultfinder-hostile"}), _SCOPE, self._ids
        )
        trace_id = self._ids.getrandbits(128) or 1
        root = builder.context(trace_id)
        self._start = time.time_ns()
        steps = [
            builder.span(
                f"{c.OP_INVOKE_AGENT} {agent}",
                builder.context(trace_id),
                root,
                {
                    c.RUN_ID: run_id,
                    c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT,
                    c.GEN_AI_AGENT_NAME: agent,
                    c.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                        [{"role": "assistant", "parts": [{"type": "text", "content": "ok"}]}]
                    ),
                },
                self._start,
                self._start + 1000,
            )
            for agent in _AGENTS
        ]
        workflow = builder.span(
            f"{c.OP_INVOKE_WORKFLOW} {run_id}",
            root,
            None,
            {c.RUN_ID: run_id, c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_WORKFLOW, c.RUN_TASK: run_id},
            self._start,
            self._start + 10**12,
            status=Status(StatusCode.ERROR, "wrong answer") if failed else None,
        )
        encoded = encode_spans([workflow, *steps]).resource_spans[0]
        self._resource = ResourceSpans()
        self._resource.CopyFrom(encoded)
        del self._resource.scope_spans[0].spans[:]
        templates = list(encoded.scope_spans[0].spans)
        self._root, self._steps = templates[0], templates[1:]
        self.sent = 0
        """Steps made so far (the root not counted)."""

    def request(self, steps: int) -> bytes:
        """A protobuf body of the next `steps` steps (and the root, in the first one)."""
        request = ExportTraceServiceRequest()
        resource = request.resource_spans.add()
        resource.CopyFrom(self._resource)
        spans = resource.scope_spans[0].spans
        if self.sent == 0:
            spans.add().CopyFrom(self._root)
        for _ in range(steps):
            span = spans.add()
            span.CopyFrom(self._steps[self.sent % len(self._steps)])
            span.span_id = self._ids.getrandbits(64).to_bytes(8, "big")
            span.start_time_unix_nano = self._start + 1000 * (self.sent + 1)
            span.end_time_unix_nano = span.start_time_unix_nano + 500
            self.sent += 1
        body: bytes = request.SerializeToString()
        return body


def failed_run_spans(
    run_id: str, steps: Sequence[tuple[str, str]], *, task: str = "Add 2 and 2."
) -> list[ReadableSpan]:
    """A failed run named `run_id`: an agent step per (agent, output) of `steps`, then its
    failed root, last, as SDKs send it."""
    ids = random.Random(os.urandom(16))
    builder = SpanBuilder(Resource.create({c.SERVICE_NAME: "faultfinder-hostile"}), _SCOPE, ids)
    trace_id = ids.getrandbits(128) or 1
    root = builder.context(trace_id)
    start = time.time_ns() - 10**9
    spans = [
        builder.span(
            f"{c.OP_INVOKE_AGENT} step {index}",
            builder.context(trace_id),
            root,
            {
                c.RUN_ID: run_id,
                c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT,
                c.GEN_AI_AGENT_NAME: agent,
                c.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": output}]}]
                ),
            },
            start + (index + 1) * 1_000_000,
            start + (index + 1) * 1_000_000 + 500_000,
        )
        for index, (agent, output) in enumerate(steps)
    ]
    spans.append(
        builder.span(
            f"{c.OP_INVOKE_WORKFLOW} hostile",
            root,
            None,
            {
                c.RUN_ID: run_id,
                c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_WORKFLOW,
                c.RUN_TASK: task,
                c.RUN_OUTCOME: "failure",
            },
            start,
            start + (len(steps) + 1) * 1_000_000,
            status=Status(StatusCode.ERROR, "wrong answer"),
        )
    )
    return spans


def named_run_body(run_id: str, agents: Sequence[str], *, task: str = "Add 2 and 2.") -> bytes:
    """A small failed run named `run_id` whose steps are spoken by `agents`, encoded by the
    OpenTelemetry SDK's OTLP encoder."""
    spans = failed_run_spans(run_id, [(agent, "5") for agent in agents], task=task)
    body: bytes = encode_spans(spans).SerializeToString()
    return body


def attribute_request(steps: int, *, attributor: str | None = None) -> bytes:
    """A `POST /api/attribute` JSON body: a trajectory of `steps` steps in which one agent
    states a figure the tool before it contradicts."""
    wrong = steps * 2 // 3
    items = [Step(index=0, agent="user", kind=StepKind.HUMAN, content="Count the widgets.")]
    for index in range(1, steps):
        if index == wrong - 1:
            step = Step(
                index=index,
                agent="Counter",
                kind=StepKind.TOOL,
                content="count_widgets() -> 1,204",
                tool_name="count_widgets",
                tool_result="1204",
            )
        elif index == wrong:
            step = Step(
                index=index, agent="Counter", content="The tool says there are 9,999 widgets."
            )
        else:
            step = Step(
                index=index, agent=_AGENTS[index % len(_AGENTS)], content=f"Batch {index} done."
            )
        items.append(step)
    trajectory = Trajectory(
        run_id=f"attribute-{steps}",
        task="Count the widgets.",
        steps=tuple(items),
        ground_truth="1204",
        final_answer="9999",
    )
    payload: dict[str, Any] = {"trajectory": trajectory.model_dump(mode="json", exclude_none=True)}
    if attributor is not None:
        payload["attributor"] = attributor
    return json.dumps(payload).encode()
