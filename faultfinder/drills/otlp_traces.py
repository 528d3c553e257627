"""Realistic multi-agent OTLP traces, encoded ahead of time for `faultfinder bench ingest`
and the drills (what every OTLP/HTTP client shares is in
`faultfinder.evaluation.replay.otlp_http`)."""

from __future__ import annotations

import functools
import gzip as gzip_codec
import json
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from faultfinder import conventions as c
from faultfinder.evaluation.replay.otlp_http import JSON_CONTENT_TYPE, PROTOBUF_CONTENT_TYPE
from faultfinder.server.otlp.otlp_json import request_to_otlp_json

BENCH_SERVICE_NAME = "faultfinder-bench-agents"
_SCOPE = InstrumentationScope("faultfinder.drills.otlp_traces", "0.1.0")


class BodyFormat(StrEnum):
    """Encoding of an OTLP/HTTP request body."""

    PROTOBUF = "protobuf"
    JSON = "json"

    @property
    def content_type(self) -> str:
        return PROTOBUF_CONTENT_TYPE if self is BodyFormat.PROTOBUF else JSON_CONTENT_TYPE


# --- SDK spans ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpanBuilder:
    """Finished SDK spans of one resource and instrumentation scope, span ids drawn from `ids`."""

    resource: Resource
    scope: InstrumentationScope
    ids: random.Random

    def context(self, trace_id: int) -> SpanContext:
        """A sampled local span context in `trace_id` with a fresh span id."""
        return SpanContext(
            trace_id=trace_id,
            span_id=self.ids.getrandbits(64) or 1,
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )

    def span(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        attributes: dict[str, Any],
        start: int,
        end: int,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        status: Status | None = None,
    ) -> ReadableSpan:
        return ReadableSpan(
            name=name,
            context=context,
            parent=parent,
            resource=self.resource,
            attributes=attributes,
            kind=kind,
            status=status or Status(StatusCode.UNSET),
            start_time=start,
            end_time=end,
            instrumentation_scope=self.scope,
        )


# --- Realistic agent runs ------------------------------------------------------------

_AGENTS: tuple[tuple[str, str], ...] = (
    ("Orchestrator", "plans the work, delegates subtasks and checks progress"),
    ("WebSurfer", "searches the web and reads pages"),
    ("FileSurfer", "opens and summarises local files"),
    ("Coder", "writes Python to compute answers"),
    ("Verifier", "checks the draft answer against the sources"),
)
_TOOLS: tuple[str, ...] = (
    "web_search",
    "fetch_page",
    "read_file",
    "run_python",
    "calculator",
    "sql_query",
)
_MODELS: tuple[str, ...] = ("gpt-4o-mini", "gpt-4o", "qwen2.5-7b-instruct", "llama-3.1-8b")
_PROSE = (
    "the agent reads the page and finds that the table lists revenue by quarter for each "
    "region while the footnote explains the currency conversion used in the report so the "
    "answer must account for exchange rates before summing values across years then it "
    "writes a short plan search for the official filing open the document extract the "
    "relevant rows compute the total verify against a second source and report the final "
    "number with units error retry timeout result status code returned json list of "
    "records dataset query filter sort group average median count distinct customers "
    "orders products invoice shipment warehouse latitude longitude museum exhibition "
    "author publication citation journal volume issue pages abstract keywords method"
)
_WORDS: tuple[str, ...] = tuple(_PROSE.split())


def _token(rng: random.Random) -> str:
    # Numbers and identifiers keep the text about as compressible as real agent output.
    draw = rng.random()
    if draw < 0.12:
        return str(rng.randint(0, 100_000))
    if draw < 0.16:
        return f"{rng.getrandbits(32):08x}"
    if draw < 0.18:
        return f"https://example.org/{rng.choice(_WORDS)}/{rng.randint(1, 9999)}"
    return rng.choice(_WORDS)


@functools.lru_cache(maxsize=4)
def _corpus(seed: int, size: int = 1 << 20) -> str:
    rng = random.Random(seed)
    parts: list[str] = []
    length = 0
    while length < size:
        sentence = " ".join(_token(rng) for _ in range(rng.randint(6, 18)))
        sentence = sentence[0].upper() + sentence[1:] + ". "
        parts.append(sentence)
        length += len(sentence)
    return "".join(parts)


class _TextSource:
    """Slices of a fixed pseudo-prose corpus: realistic text bytes without per-word cost."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.corpus = _corpus(seed)

    def text(self, low: int, high: int) -> str:
        length = self.rng.randint(low, high)
        start = self.rng.randrange(0, len(self.corpus) - length)
        return self.corpus[start : start + length].strip()


def _messages(*pairs: tuple[str, str]) -> str:
    return json.dumps(
        [{"role": role, "parts": [{"type": "text", "content": text}]} for role, text in pairs],
        ensure_ascii=False,
    )


@dataclass
class AgentTraceFactory:
    """Builds runs of a multi-agent system as finished SDK spans, in export (end) order.

    Content is reproducible from `seed`; trace and span ids are fresh per factory so
    repeated benchmarks against one server never collide with earlier spans.
    """

    seed: int = 0
    project: str | None = None
    start_ns: int = field(default_factory=time.time_ns)
    _text: _TextSource = field(init=False)
    _rng: random.Random = field(init=False)
    _ids: random.Random = field(init=False)
    _builder: SpanBuilder = field(init=False)
    _clock: int = field(init=False)
    _runs: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._text = _TextSource(self.seed + 1)
        self._ids = random.Random(os.urandom(16))
        attributes: dict[str, str] = {"service.name": BENCH_SERVICE_NAME}
        if self.project:
            attributes[c.PROJECT_NAME] = self.project
            attributes[c.OI_PROJECT_NAME] = self.project
        self._builder = SpanBuilder(Resource.create(attributes), _SCOPE, self._ids)
        self._clock = self.start_ns

    def _tick(self, low_ms: int, high_ms: int) -> int:
        self._clock += self._rng.randint(low_ms, high_ms) * 1_000_000
        return self._clock

    def run(self) -> list[ReadableSpan]:
        """One run: a workflow root, agent turns, and their LLM and tool calls."""
        rng, text = self._rng, self._text
        self._runs += 1
        trace_id = self._ids.getrandbits(128) or 1
        conversation = f"bench-{trace_id:032x}"
        root = self._builder.context(trace_id)
        root_start = self._tick(1, 5)
        task = text.text(200, 500)
        spans: list[ReadableSpan] = []
        answer = ""
        for _turn in range(rng.randint(3, 8)):
            agent, description = rng.choice(_AGENTS)
            agent_ctx = self._builder.context(trace_id)
            agent_start = self._tick(1, 3)
            model = rng.choice(_MODELS)
            calls = 2 if rng.random() < 0.5 else 1
            for call in range(calls):
                chat_ctx = self._builder.context(trace_id)
                chat_start = self._tick(1, 2)
                prompt = text.text(1000, 1800)
                reply = text.text(500, 1100)
                chat_attrs: dict[str, Any] = {
                    c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
                    c.GEN_AI_REQUEST_MODEL: model,
                    c.GEN_AI_AGENT_NAME: agent,
                    c.GEN_AI_CONVERSATION_ID: conversation,
                    c.GEN_AI_SYSTEM_INSTRUCTIONS: json.dumps(
                        [{"type": "text", "content": f"You are {agent}; you {description}."}]
                    ),
                    c.GEN_AI_INPUT_MESSAGES: _messages(("user", prompt)),
                    c.GEN_AI_OUTPUT_MESSAGES: _messages(("assistant", reply)),
                    c.GEN_AI_USAGE_INPUT_TOKENS: len(prompt) // 4,
                    c.GEN_AI_USAGE_OUTPUT_TOKENS: len(reply) // 4,
                }
                spans.append(
                    self._builder.span(
                        f"{c.OP_CHAT} {model}",
                        chat_ctx,
                        agent_ctx,
                        chat_attrs,
                        chat_start,
                        self._tick(200, 2500),
                        kind=SpanKind.CLIENT,
                    )
                )
                answer = reply
                if call == 0 and calls == 2:
                    tool = rng.choice(_TOOLS)
                    tool_ctx = self._builder.context(trace_id)
                    tool_start = self._tick(1, 2)
                    failed = rng.random() < 0.05
                    tool_attrs: dict[str, Any] = {
                        c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
                        c.GEN_AI_TOOL_NAME: tool,
                        c.GEN_AI_TOOL_CALL_ID: f"call_{tool_ctx.span_id:016x}",
                        c.GEN_AI_AGENT_NAME: agent,
                        c.GEN_AI_CONVERSATION_ID: conversation,
                        c.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps(
                            {"query": text.text(40, 160), "limit": rng.randint(1, 20)}
                        ),
                        c.GEN_AI_TOOL_CALL_RESULT: text.text(1400, 2800),
                    }
                    status = None
                    if failed:
                        tool_attrs[c.ERROR_TYPE] = "TimeoutError"
                        status = Status(StatusCode.ERROR, f"{tool} timed out")
                    spans.append(
                        self._builder.span(
                            f"{c.OP_EXECUTE_TOOL} {tool}",
                            tool_ctx,
                            agent_ctx,
                            tool_attrs,
                            tool_start,
                            self._tick(20, 900),
                            status=status,
                        )
                    )
            agent_attrs: dict[str, Any] = {
                c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT,
                c.GEN_AI_AGENT_NAME: agent,
                c.GEN_AI_AGENT_ID: f"{agent.lower()}-{self.seed}",
                c.GEN_AI_CONVERSATION_ID: conversation,
                c.GEN_AI_REQUEST_MODEL: model,
                c.GEN_AI_INPUT_MESSAGES: _messages(("user", text.text(450, 950))),
                c.GEN_AI_OUTPUT_MESSAGES: _messages(("assistant", answer[:1000])),
            }
            spans.append(
                self._builder.span(
                    f"{c.OP_INVOKE_AGENT} {agent}",
                    agent_ctx,
                    root,
                    agent_attrs,
                    agent_start,
                    self._tick(1, 3),
                )
            )
        root_attrs: dict[str, Any] = {
            c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_WORKFLOW,
            c.GEN_AI_CONVERSATION_ID: conversation,
            c.RUN_TASK: task,
            c.RUN_FINAL_ANSWER: answer[:400],
            c.RUN_FRAMEWORK: "bench-agents",
        }
        spans.append(
            self._builder.span(
                f"{c.OP_INVOKE_WORKFLOW} bench-run-{self._runs}",
                root,
                None,
                root_attrs,
                root_start,
                self._tick(1, 3),
                kind=SpanKind.SERVER,
            )
        )
        return spans

    def spans(self, total: int) -> Iterator[ReadableSpan]:
        """Exactly `total` spans from consecutive runs (the last run may be cut short)."""
        produced = 0
        while produced < total:
            for span in self.run():
                if produced == total:
                    return
                yield span
                produced += 1


# --- Pre-encoded requests ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """One OTLP/HTTP request body, ready to POST."""

    body: bytes
    spans: int
    headers: Mapping[str, str]
    raw_size: int
    """Body size before compression."""


def encode_request(
    spans: Sequence[ReadableSpan], body_format: BodyFormat, *, gzip: bool = False
) -> PreparedRequest:
    """The OTLP/HTTP request carrying `spans`, in protobuf or OTLP/JSON, optionally gzipped."""
    request = encode_spans(spans)
    if body_format is BodyFormat.PROTOBUF:
        body = request.SerializeToString()
    else:
        body = request_to_otlp_json(request)
    raw_size = len(body)
    headers = {"content-type": body_format.content_type}
    if gzip:
        body = gzip_codec.compress(body, compresslevel=6)
        headers["content-encoding"] = "gzip"
    return PreparedRequest(body=body, spans=len(spans), headers=headers, raw_size=raw_size)


def prepare_requests(
    total_spans: int,
    *,
    batch: int = 100,
    body_format: BodyFormat = BodyFormat.PROTOBUF,
    gzip: bool = False,
    project: str | None = None,
    seed: int = 0,
    on_request: Callable[[PreparedRequest], None] | None = None,
) -> list[PreparedRequest]:
    """`total_spans` spans of realistic agent runs as request bodies of `batch` spans each."""
    if total_spans < 1:
        raise ValueError(f"total_spans must be at least 1, got {total_spans}")
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    factory = AgentTraceFactory(seed=seed, project=project)
    requests: list[PreparedRequest] = []
    pending: list[ReadableSpan] = []
    for span in factory.spans(total_spans):
        pending.append(span)
        if len(pending) == batch:
            requests.append(encode_request(pending, body_format, gzip=gzip))
            pending = []
            if on_request:
                on_request(requests[-1])
    if pending:
        requests.append(encode_request(pending, body_format, gzip=gzip))
        if on_request:
            on_request(requests[-1])
    return requests
