"""The load of the chaos drills: distinct agent runs, ready-encoded as OTLP/HTTP protobuf
bodies, together with the (trace id, span id) keys each body carries."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Status, StatusCode

from faultfinder import conventions as c
from faultfinder.drills.otlp_traces import AgentTraceFactory, SpanBuilder

__all__ = ["ChaosRequest", "ChaosTraffic", "SpanKey", "span_keys"]

SpanKey = tuple[str, str]
"""(trace id, span id) in lower-case hex, as the span store keeps them."""

_SCOPE = InstrumentationScope("faultfinder.drills.chaos", "0.1.0")
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
        self._realistic_templates: list[_Template] = []
        self._runs_per_request = runs_per_request
        self._failed_interval = failed_interval_s
        self._last_failed = float("-inf")
        self._ids = random.Random(seed if seed is not None else os.urandom(16))
        self._builder = SpanBuilder(
            Resource.create({c.SERVICE_NAME: "faultfinder-chaos"}), _SCOPE, self._ids
        )
        self._lock = threading.Lock()
        self._templates: dict[bool, _Template] = {}
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

    def _template(self, *, failed: bool, number: int) -> _Template:
        # The SDK encodes a few runs once; a request is their bytes with fresh ids written
        # in: tens of microseconds, half of what copying and serializing protobuf messages
        # cost, which left the overload drill's generator short of one core.
        if self._realistic and not failed:
            if len(self._realistic_templates) < _REALISTIC_TEMPLATES:
                encoded = encode_spans(self._factory.run()).SerializeToString()
                self._realistic_templates.append(_Template.of(encoded))
            return self._realistic_templates[number % len(self._realistic_templates)]
        if failed not in self._templates:
            encoded = encode_spans(self.run_spans(failed=failed)).SerializeToString()
            self._templates[failed] = _Template.of(encoded)
        return self._templates[failed]

    def next_request(self) -> ChaosRequest:
        """A request of `runs_per_request` new runs (distinct trace and span ids)."""
        templates: list[_Template] = []
        failed = 0
        for _ in range(self._runs_per_request):
            is_failed = self._next_is_failed()
            failed += is_failed
            with self._lock:
                number = self.runs
                self.runs += 1
            templates.append(self._template(failed=is_failed, number=number))
        id_bytes = sum(template.id_bytes for template in templates)
        with self._lock:
            ids = self._ids.randbytes(id_bytes)
            # An all-zero trace or span id is invalid in OTLP; any eight zero bytes in a row
            # (practically never) draw the lot again.
            while _ZERO_ID in ids:
                ids = self._ids.randbytes(id_bytes)
        body = bytearray().join(template.encoded for template in templates)
        hex_ids = ids.hex()
        keys: list[SpanKey] = []
        at = 0
        drawn = 0
        for template in templates:
            for offset, source, size in template.writes:
                start = at + offset
                begin = drawn + source
                body[start : start + size] = ids[begin : begin + size]
            keys.extend(
                (
                    hex_ids[2 * (drawn + trace) : 2 * (drawn + trace + _TRACE_ID_SIZE)],
                    hex_ids[2 * (drawn + span) : 2 * (drawn + span + _SPAN_ID_SIZE)],
                )
                for trace, span in template.keys
            )
            at += len(template.encoded)
            drawn += template.id_bytes
        return ChaosRequest(bytes(body), tuple(keys), self._runs_per_request, failed)


_TRACE_ID_SIZE = 16
_SPAN_ID_SIZE = 8
_ZERO_ID = bytes(_SPAN_ID_SIZE)

# Field numbers of the OTLP trace protos, the path from a request to each span's ids.
_REQUEST_RESOURCE_SPANS = 1
_RESOURCE_SPANS_SCOPE_SPANS = 2
_SCOPE_SPANS_SPANS = 2
_SPAN_TRACE_ID = 1
_SPAN_SPAN_ID = 2
_SPAN_PARENT_SPAN_ID = 4
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at `at` and the position after it."""
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _fields(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, first byte, end) of each field value in `data[start:end]`;
    for a length-delimited field the value is its payload, without the length."""
    at = start
    while at < end:
        key, at = _varint(data, at)
        number, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            _, after = _varint(data, at)
        elif wire_type == _FIXED64:
            after = at + 8
        elif wire_type == _LENGTH_DELIMITED:
            size, at = _varint(data, at)
            after = at + size
        elif wire_type == _FIXED32:
            after = at + 4
        else:
            raise ValueError(f"unexpected protobuf wire type {wire_type} at byte {at}")
        if after > end:
            raise ValueError(f"protobuf field {number} runs past its message at byte {at}")
        yield number, wire_type, at, after
        at = after


def _children(data: bytes, start: int, end: int, number: int) -> Iterator[tuple[int, int]]:
    """(first byte, end) of each embedded message `number` in the message `data[start:end]`."""
    for field_number, wire_type, begin, after in _fields(data, start, end):
        if field_number == number and wire_type == _LENGTH_DELIMITED:
            yield begin, after


@dataclass(frozen=True, slots=True)
class _Template:
    """A serialized ExportTraceServiceRequest and where its ids are.

    Trace and span ids are fixed-size bytes fields, so writing new ones in place never moves
    anything; and a request of several runs is the concatenation of their requests, the
    repeated `resource_spans` being all a request holds. The new ids of one use are drawn as
    one block: a trace id per distinct trace, then a span id per span.
    """

    encoded: bytes
    id_bytes: int
    """Size of the block of new ids."""
    writes: tuple[tuple[int, int, int], ...]
    """(offset in `encoded`, offset in the block of new ids, size) of each id to write; a
    parent span id takes the new id of the span it names, so the run's tree holds."""
    keys: tuple[tuple[int, int], ...]
    """(trace id, span id) offsets in the block of new ids of each span, in body order."""

    @classmethod
    def of(cls, encoded: bytes) -> _Template:
        """Find every span's ids by walking the protobuf wire format of `encoded`."""
        spans: list[tuple[int, int, int | None]] = []
        traces: dict[bytes, int] = {}
        span_ids: dict[bytes, int] = {}
        for resource in _children(encoded, 0, len(encoded), _REQUEST_RESOURCE_SPANS):
            for scope in _children(encoded, *resource, _RESOURCE_SPANS_SCOPE_SPANS):
                for message in _children(encoded, *scope, _SCOPE_SPANS_SPANS):
                    offsets = _span_id_offsets(encoded, *message)
                    trace_id = encoded[offsets[0] : offsets[0] + _TRACE_ID_SIZE]
                    span_id = encoded[offsets[1] : offsets[1] + _SPAN_ID_SIZE]
                    if span_id in span_ids:
                        raise ValueError(f"span id {span_id.hex()} occurs twice in a template")
                    traces.setdefault(trace_id, len(traces))
                    span_ids[span_id] = len(spans)
                    spans.append(offsets)
        if not spans:
            raise ValueError("a template request holds no span")
        span_block = _TRACE_ID_SIZE * len(traces)
        writes: list[tuple[int, int, int]] = []
        keys: list[tuple[int, int]] = []
        for index, (trace_at, span_at, parent_at) in enumerate(spans):
            trace = _TRACE_ID_SIZE * traces[encoded[trace_at : trace_at + _TRACE_ID_SIZE]]
            span = span_block + _SPAN_ID_SIZE * index
            writes.append((trace_at, trace, _TRACE_ID_SIZE))
            writes.append((span_at, span, _SPAN_ID_SIZE))
            keys.append((trace, span))
            if parent_at is not None:
                parent = span_ids.get(encoded[parent_at : parent_at + _SPAN_ID_SIZE])
                if parent is None:
                    raise ValueError("a template span's parent is not in the template")
                writes.append((parent_at, span_block + _SPAN_ID_SIZE * parent, _SPAN_ID_SIZE))
        return cls(encoded, span_block + _SPAN_ID_SIZE * len(spans), tuple(writes), tuple(keys))


def _span_id_offsets(data: bytes, start: int, end: int) -> tuple[int, int, int | None]:
    """Where the trace id, span id and parent span id (None: a root) of the span
    `data[start:end]` begin."""
    found: dict[int, int] = {}
    sizes = {
        _SPAN_TRACE_ID: _TRACE_ID_SIZE,
        _SPAN_SPAN_ID: _SPAN_ID_SIZE,
        _SPAN_PARENT_SPAN_ID: _SPAN_ID_SIZE,
    }
    for number, wire_type, begin, after in _fields(data, start, end):
        if number not in sizes or wire_type != _LENGTH_DELIMITED or begin == after:
            continue
        if after - begin != sizes[number] or number in found:
            raise ValueError(f"span field {number} is not one id of {sizes[number]} bytes")
        found[number] = begin
    if _SPAN_TRACE_ID not in found or _SPAN_SPAN_ID not in found:
        raise ValueError("a template span has no trace id or no span id")
    return found[_SPAN_TRACE_ID], found[_SPAN_SPAN_ID], found.get(_SPAN_PARENT_SPAN_ID)
