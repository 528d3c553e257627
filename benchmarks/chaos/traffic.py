"""The load of the chaos drills: distinct agent runs, ready-encoded as OTLP/HTTP protobuf
bodies, together with the (trace id, span id) keys each body carries."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Status, StatusCode

from faultfinder import conventions as c
from faultfinder.benchmarks.otlp_traces import AgentTraceFactory, SpanBuilder

__all__ = ["ChaosRequest", "ChaosTraffic", "SpanKey", "span_keys"]

SpanKey = tuple[str, str]
"""(trace id, span id) in lower-case hex, as the span store keeps them."""

_SCOPE = InstrumentationScope("faultfinder.benchmarks.chaos", "0.1.0")
_AGENTS = ("Planner", "Searcher", "Coder", "Checker")
_REALISTIC_TEMPLATES = 8


def span_keys(spans: Sequence[ReadableSpan]) -> set[SpanKey]:
    """The keys of SDK spans, as `ChaosRequest.spans` holds them."""
    return {
        (f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}")
        for span in spans
        if span.context is not None
    }


@dataclass(frozen=True, slots=True)
class ChaosRequest:
    """One OTLP/HTTP protobuf body and the spans it carries."""

    body: bytes
    spans: tuple[SpanKey, ...]
    runs: int
    failed_runs: int


class ChaosTraffic:
    """Distinct small agent runs (a workflow root and one span per agent turn) as OTLP bodies,
    or with `realistic` the ≈20-span, ≈50 kB runs of `faultfinder bench ingest`.

    A run fails (its root and one tool step end in ERROR) at most every
    `failed_interval_s` seconds, so attribution work grows with time, not with ingest speed.
    """

    def __init__(
        self,
        *,
        steps_per_run: int = 5,
        runs_per_request: int = 1,
        failed_interval_s: float | None = 1.0,
        realistic: bool = False,
        seed: int | None = None,
    ) -> None:
        self._steps = steps_per_run
        self._realistic = realistic
        self._factory = AgentTraceFactory(seed=seed or 0)
        self._realistic_templates: list[ResourceSpans] = []
        self._runs_per_request = runs_per_request
        self._failed_interval = failed_interval_s
        self._last_failed = float("-inf")
        self._ids = random.Random(seed if seed is not None else os.urandom(16))
        self._builder = SpanBuilder(
            Resource.create({c.SERVICE_NAME: "faultfinder-chaos"}), _SCOPE, self._ids
        )
        self._lock = threading.Lock()
        self._templates: dict[bool, ResourceSpans] = {}
        self.runs = 0

    def run_spans(self, *, failed: bool) -> list[ReadableSpan]:
        """The spans of one new run, root last (the order an exporter sends them)."""
        with self._lock:
            self.runs += 1
            number = self.runs
            trace_id = self._ids.getrandbits(128) or 1
        root = self._builder.context(trace_id)
        start = time.time_ns()
        spans: list[ReadableSpan] = []
        for index in range(self._steps):
            agent = _AGENTS[index % len(_AGENTS)]
            tool_fails = failed and index == self._steps // 2
            operation = c.OP_EXECUTE_TOOL if tool_fails else c.OP_INVOKE_AGENT
            content = (
                "Traceback: KeyError 'price' in the hotel list"
                if tool_fails
                else f"{agent} reports progress on run {number}, step {index}."
            )
            attributes: dict[str, Any] = {
                c.GEN_AI_OPERATION_NAME: operation,
                c.GEN_AI_AGENT_NAME: agent,
                c.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": content}]}]
                ),
            }
            if tool_fails:
                attributes[c.GEN_AI_TOOL_NAME] = "parse_hotels"
                attributes[c.GEN_AI_TOOL_CALL_RESULT] = content
            begin = start + (index + 1) * 1_000_000
            spans.append(
                self._builder.span(
                    f"{operation} {agent}",
                    self._builder.context(trace_id),
                    root,
                    attributes,
                    begin,
                    begin + 500_000,
                    status=Status(StatusCode.ERROR, "KeyError") if tool_fails else None,
                )
            )
        spans.append(
            self._builder.span(
                f"{c.OP_INVOKE_WORKFLOW} chaos-run-{number}",
                root,
                None,
                {c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_WORKFLOW, c.RUN_TASK: f"chaos run {number}"},
                start,
                start + (self._steps + 2) * 1_000_000,
                status=Status(StatusCode.ERROR, "wrong answer") if failed else None,
            )
        )
        return spans

    def _next_is_failed(self) -> bool:
        if self._failed_interval is None:
            return False
        now = time.monotonic()
        with self._lock:
            if now - self._last_failed >= self._failed_interval:
                self._last_failed = now
                return True
        return False

    def exporter_batch(self) -> list[ReadableSpan]:
        """`runs_per_request` new runs as SDK spans, for an exporter to send."""
        return [
            span
            for _ in range(self._runs_per_request)
            for span in (self._factory.run() if self._realistic else self.run_spans(failed=False))
        ]

    def _template(self, *, failed: bool) -> ResourceSpans:
        # The SDK encodes a few runs once; requests copy them with fresh ids, which is ten
        # times cheaper than encoding anew and keeps the load generator off the CPU.
        if self._realistic and not failed:
            if len(self._realistic_templates) < _REALISTIC_TEMPLATES:
                request = encode_spans(self._factory.run())
                self._realistic_templates.append(request.resource_spans[0])
            return self._realistic_templates[self.runs % len(self._realistic_templates)]
        if failed not in self._templates:
            request = encode_spans(self.run_spans(failed=failed))
            self._templates[failed] = request.resource_spans[0]
        return self._templates[failed]

    def next_request(self) -> ChaosRequest:
        """A request of `runs_per_request` new runs (distinct trace and span ids)."""
        request = ExportTraceServiceRequest()
        keys: list[SpanKey] = []
        failed = 0
        for _ in range(self._runs_per_request):
            is_failed = self._next_is_failed()
            failed += is_failed
            resource_spans = request.resource_spans.add()
            resource_spans.CopyFrom(self._template(failed=is_failed))
            with self._lock:
                self.runs += 1
                trace_id = self._ids.getrandbits(128).to_bytes(16, "big")
                spans = [span for scope in resource_spans.scope_spans for span in scope.spans]
                new_ids = {
                    span.span_id: self._ids.getrandbits(64).to_bytes(8, "big") for span in spans
                }
            for span in spans:
                span.trace_id = trace_id
                if span.parent_span_id:
                    span.parent_span_id = new_ids[span.parent_span_id]
                span.span_id = new_ids[span.span_id]
                keys.append((trace_id.hex(), span.span_id.hex()))
        return ChaosRequest(
            request.SerializeToString(), tuple(keys), self._runs_per_request, failed
        )
