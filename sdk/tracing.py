"""Instrument agents: `configure()` OTLP export, then record runs, agent steps and tool calls.

The spans follow the OpenTelemetry GenAI semantic conventions (plus `faultfinder.*`
attributes where those are silent), so the sidecar reads each run as the trajectory the
program went through: one step per agent turn, tool call, handoff or message, in order.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from contextvars import Token
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ParamSpec, Self, TypeVar, cast
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.util.re import parse_env_headers

from faultfinder import __version__
from faultfinder import conventions as c
from faultfinder.sdk.errors import ConfigurationError

__all__ = [
    "API_KEY_VARIABLE",
    "DEFAULT_GRPC_ENDPOINT",
    "DEFAULT_HTTP_ENDPOINT",
    "DEFAULT_SERVICE_NAME",
    "ENDPOINT_VARIABLE",
    "PROTOCOLS",
    "AgentStep",
    "ExportTarget",
    "Run",
    "ToolCall",
    "agent",
    "agent_step",
    "configure",
    "current_run",
    "current_step",
    "export_target",
    "flush",
    "handoff",
    "message",
    "run",
    "shutdown",
    "tool",
    "tool_call",
]

DEFAULT_HTTP_ENDPOINT = "http://127.0.0.1:4318"
"""Where spans go over OTLP/HTTP when neither an argument nor the environment says."""
DEFAULT_GRPC_ENDPOINT = "http://127.0.0.1:4317"
"""Where spans go over OTLP/gRPC when neither an argument nor the environment says."""
DEFAULT_SERVICE_NAME = "agents"
"""`service.name` when neither `service_name` nor `OTEL_SERVICE_NAME` gives one."""
PROTOCOLS = ("http/protobuf", "grpc")
"""OTLP transports `configure()` can export over."""

ENDPOINT_VARIABLE = "FAULTFINDER_ENDPOINT"
"""The sidecar's base URL, for spans (before the `OTEL_*` variables) and for `Client`."""
API_KEY_VARIABLE = "FAULTFINDER_API_KEY"
"""An API key of the sidecar, sent by `configure()`'s exporter and by `Client`."""
TRACES_PATH = "/v1/traces"
_TRACER_NAME = "faultfinder.sdk"


_provider: TracerProvider | None = None
"""The provider the helpers record into; set by `configure()`."""

_RUN_KEY = otel_context.create_key("faultfinder-run")
_STEP_KEY = otel_context.create_key("faultfinder-agent-step")


# --- where spans go ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExportTarget:
    """Where and how `configure()` exports spans, after arguments and environment."""

    protocol: str
    """`http/protobuf` or `grpc`."""
    endpoint: str
    """Full URL: ending in `/v1/traces` for HTTP, `scheme://host:port` for gRPC."""
    headers: Mapping[str, str] = field(default_factory=dict)


def _setting(argument: str | None, argument_name: str, *variables: str) -> tuple[str, str] | None:
    """The first of argument → environment variables that is set, and where it came from."""
    if argument is not None:
        return argument, f"{argument_name} argument"
    for variable in variables:
        value = os.environ.get(variable, "").strip()
        if value:
            return value, variable
    return None


def export_target(
    endpoint: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    protocol: str | None = None,
) -> ExportTarget:
    """Resolve the OTLP target: the arguments, else `FAULTFINDER_ENDPOINT`, else the
    standard `OTEL_EXPORTER_OTLP_*` variables, else the local sidecar.

    `endpoint`, `FAULTFINDER_ENDPOINT` and `OTEL_EXPORTER_OTLP_ENDPOINT` are base URLs
    (`/v1/traces` is appended for HTTP unless already there);
    `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is used as it is. Without `headers`, the
    `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS` are sent, plus `Authorization: Bearer
    $FAULTFINDER_API_KEY` when that is set.
    """
    chosen = _setting(
        protocol,
        "protocol",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    )
    resolved_protocol, protocol_source = chosen or ("http/protobuf", "default")
    if resolved_protocol not in PROTOCOLS:
        raise ConfigurationError(
            f"{protocol_source}: OTLP protocol {resolved_protocol!r} is not supported; "
            f"use one of {', '.join(PROTOCOLS)}"
        )
    grpc = resolved_protocol == "grpc"

    signal_url = False
    if endpoint is not None:
        url, source = endpoint.strip(), "endpoint argument"
    elif sidecar := _setting(None, "", ENDPOINT_VARIABLE):
        url, source = sidecar
    elif traces := _setting(None, "", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        (url, source), signal_url = traces, True
    elif base := _setting(None, "", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        url, source = base
    else:
        url, source = (DEFAULT_GRPC_ENDPOINT if grpc else DEFAULT_HTTP_ENDPOINT), "default"

    if grpc and "://" not in url:
        url = f"http://{url}"  # gRPC endpoints are often written host:port
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigurationError(
            f"{source}: OTLP endpoint {url!r} is not an http(s) URL such as {DEFAULT_HTTP_ENDPOINT}"
        )
    if not grpc and not signal_url and not parts.path.rstrip("/").endswith(TRACES_PATH):
        url = url.rstrip("/") + TRACES_PATH

    if headers is not None:
        resolved_headers = dict(headers)
    else:
        raw = _setting(None, "", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
        resolved_headers = dict(parse_env_headers(raw[0], liberal=True)) if raw else {}
        api_key = _setting(None, "", API_KEY_VARIABLE)
        if api_key and not any(name.lower() == "authorization" for name in resolved_headers):
            resolved_headers["authorization"] = f"Bearer {api_key[0]}"
    return ExportTarget(protocol=resolved_protocol, endpoint=url, headers=resolved_headers)


def _otlp_exporter(target: ExportTarget) -> SpanExporter:
    # Imported here: each exporter pulls in its transport (requests or grpcio).
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter(
            endpoint=target.endpoint,
            insecure=target.endpoint.startswith("http://"),
            headers=dict(target.headers),
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter(endpoint=target.endpoint, headers=dict(target.headers))


def _span_limits() -> SpanLimits:
    # Agent messages and tool results are often many kilobytes; the SDK defaults (and any
    # OTEL_*_LIMIT in the environment) would cut them, and attribution needs the full text.
    return SpanLimits(
        max_attribute_length=SpanLimits.UNSET,
        max_span_attribute_length=SpanLimits.UNSET,
        max_span_attributes=4096,
        max_attributes=4096,
        max_events=1024,
        max_event_attributes=128,
    )


def _resource(service_name: str | None, project: str | None) -> Resource:
    attributes: dict[str, str] = {}
    if service_name is not None:
        attributes[c.SERVICE_NAME] = service_name
    if project is not None:
        attributes[c.PROJECT_NAME] = project
    # Resource.create adds OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; arguments win.
    resource = Resource.create(attributes)
    if str(resource.attributes.get(c.SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({c.SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return resource


class _RunIdStamp(SpanProcessor):
    """Copies an explicit run id onto every span started inside that run, including
    spans of other instrumentations, so the sidecar files them under the same run."""

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        current = otel_context.get_value(_RUN_KEY, parent_context)
        if not isinstance(current, Run) or current.explicit_run_id is None:
            return
        if span.attributes is None or c.RUN_ID not in span.attributes:
            span.set_attribute(c.RUN_ID, current.explicit_run_id)


def configure(
    endpoint: str | None = None,
    *,
    service_name: str | None = None,
    project: str | None = None,
    headers: Mapping[str, str] | None = None,
    protocol: str | None = None,
    tracer_provider: TracerProvider | None = None,
    exporter: SpanExporter | None = None,
    batch: bool = True,
    set_global: bool = True,
) -> TracerProvider:
    """Send the spans of `run`/`agent_step`/`tool_call` (and of any OTel instrumentation)
    to the sidecar over OTLP, and return the provider.

    Arguments win over the environment: `FAULTFINDER_ENDPOINT` and `FAULTFINDER_API_KEY`,
    then the standard `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`, `…_HEADERS`, `…_PROTOCOL`,
    `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` (see `export_target`). The
    default target is the local sidecar (http://127.0.0.1:4318) and the default service
    name `agents`. `project` becomes the resource attribute `faultfinder.project.name`.

    A new provider gets span limits raised so long messages are never truncated. Pass
    `tracer_provider` to add the export to your own provider instead (set service name
    and project on its Resource then), `exporter` to export elsewhere than OTLP,
    `batch=False` to export each span as it ends. The provider becomes the global
    OpenTelemetry provider unless `set_global=False` or one is already set. Spans
    still queued are sent at interpreter exit, or by `flush()` / `shutdown()`.
    """
    global _provider
    if tracer_provider is not None and (service_name is not None or project is not None):
        raise ConfigurationError(
            "service_name and project describe a new provider's Resource; with "
            "tracer_provider=…, set them on the Resource of the provider you pass"
        )
    if exporter is None:
        exporter = _otlp_exporter(export_target(endpoint, headers=headers, protocol=protocol))
    provider = tracer_provider or TracerProvider(
        resource=_resource(service_name, project), span_limits=_span_limits()
    )
    provider.add_span_processor(_RunIdStamp())
    provider.add_span_processor(
        BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    )
    _provider = provider
    if set_global and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)
    return provider


def flush(timeout_seconds: float = 30.0) -> bool:
    """Export every finished span now; False when the export did not finish in time."""
    provider = _provider or trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is None:
        return True
    return bool(force_flush(int(timeout_seconds * 1000)))


def shutdown() -> None:
    """Flush and stop the provider `configure()` set up (yours, if you passed one); spans
    recorded afterwards are dropped."""
    global _provider
    provider, _provider = _provider, None
    if provider is not None:
        provider.shutdown()


def _tracer() -> trace.Tracer:
    provider = _provider if _provider is not None else trace.get_tracer_provider()
    return provider.get_tracer(_TRACER_NAME, __version__)


# --- span helpers ---------------------------------------------------------------------------


class _Clock:
    """Wall-clock nanoseconds that never repeat or go back within the process.

    The sidecar orders steps by start time; two steps recorded within one clock tick
    must still come out in the order the program made them.
    """

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def now(self) -> int:
        with self._lock:
            self._last = max(time.time_ns(), self._last + 1)
            return self._last


_clock = _Clock()


def _text(value: object) -> str:
    """A value as step text: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _messages(role: str, texts: list[str]) -> str:
    """GenAI semconv messages: `[{"role": …, "parts": [{"type": "text", "content": …}]}]`."""
    return json.dumps(
        [{"role": role, "parts": [{"type": "text", "content": text}]} for text in texts],
        ensure_ascii=False,
    )


def _error_type(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _record_error(span: Span, exc: BaseException) -> str:
    description = _describe(exc)
    span.record_exception(exc)
    span.set_attribute(c.ERROR_TYPE, _error_type(exc))
    span.set_status(Status(StatusCode.ERROR, description))
    return description


_STEP_ERROR_MARK = "_faultfinder_step_error"


def _mark_as_step_error(exc: BaseException | None) -> None:
    """Remember that a step of the trajectory already shows `exc`."""
    if exc is not None:
        with contextlib.suppress(AttributeError, TypeError):
            setattr(exc, _STEP_ERROR_MARK, True)


def _is_step_error(exc: BaseException) -> bool:
    return bool(getattr(exc, _STEP_ERROR_MARK, False))


def current_run() -> Run | None:
    """The run whose block the caller is in (in this thread or asyncio task), if any."""
    value = otel_context.get_value(_RUN_KEY)
    return value if isinstance(value, Run) else None


def current_step() -> AgentStep | None:
    """The agent step whose block the caller is in, if any."""
    value = otel_context.get_value(_STEP_KEY)
    return value if isinstance(value, AgentStep) else None


def _run_attributes() -> dict[str, str]:
    current = current_run()
    if current is not None and current.explicit_run_id is not None:
        return {c.RUN_ID: current.explicit_run_id}
    return {}


def _note_step_started() -> None:
    """Tell the enclosing agent step that a step is nested in it (see `AgentStep`)."""
    parent = current_step()
    if parent is not None:
        parent._has_child_steps = True


class _Scope:
    """A span that is current while its `with` / `async with` block runs."""

    def __init__(self) -> None:
        self._span: Span | None = None
        self._token: Token[Context] | None = None
        self._ended = False

    def _start(self) -> tuple[Span, Context]:
        raise NotImplementedError

    def _finish(self, span: Span, exc: BaseException | None) -> None:
        if exc is not None:
            _record_error(span, exc)

    @property
    def span(self) -> Span:
        """The OpenTelemetry span, for attributes the helpers do not cover."""
        if self._span is None:
            raise RuntimeError(f"{type(self).__name__} has not started; use it in a `with` block")
        return self._span

    @property
    def span_id(self) -> str:
        """The span id as 16 hex digits."""
        return trace.format_span_id(self.span.get_span_context().span_id)

    @property
    def trace_id(self) -> str:
        """The trace id as 32 hex digits."""
        return trace.format_trace_id(self.span.get_span_context().trace_id)

    def _live_span(self) -> Span:
        if self._ended:
            raise RuntimeError(f"{type(self).__name__} has already ended")
        return self.span

    def __enter__(self) -> Self:
        if self._span is not None:
            raise RuntimeError(f"a {type(self).__name__} can be entered only once")
        span, ctx = self._start()
        self._span = span
        self._token = otel_context.attach(ctx)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        span = self.span
        try:
            self._finish(span, exc)
        finally:
            self._ended = True
            span.end(end_time=_clock.now())
            if self._token is not None:
                otel_context.detach(self._token)

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, traceback)


class Run(_Scope):
    """One run of the agent system: the root span every step of the run hangs under.

    Mark the verdict with `succeed()` / `fail()`; an exception escaping the block marks
    the run failed (and is re-raised). Query the sidecar later with `run_id`.
    """

    def __init__(
        self,
        task: str,
        *,
        ground_truth: str | None = None,
        run_id: str | None = None,
        framework: str | None = None,
    ) -> None:
        super().__init__()
        self.task = task
        self.ground_truth = ground_truth
        self.explicit_run_id = run_id
        self.framework = framework
        self.outcome: str | None = None
        """`success` / `failure` once decided in the block."""

    def _start(self) -> tuple[Span, Context]:
        attributes: dict[str, str] = {
            c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_WORKFLOW,
            c.RUN_TASK: self.task,
            c.GEN_AI_INPUT_MESSAGES: _messages("user", [self.task]),
        }
        optional = {
            c.RUN_GROUND_TRUTH: self.ground_truth,
            c.RUN_ID: self.explicit_run_id,
            c.RUN_FRAMEWORK: self.framework,
        }
        attributes.update({key: value for key, value in optional.items() if value is not None})
        # A run is always the root of its own trace (the sidecar's unit of a run); an
        # enclosing span, e.g. the web request that started it, is kept as a link.
        enclosing = trace.get_current_span().get_span_context()
        span = _tracer().start_span(
            c.OP_INVOKE_WORKFLOW if self.framework is None else f"invoke_workflow {self.framework}",
            context=Context(),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=[Link(enclosing)] if enclosing.is_valid else None,
            start_time=_clock.now(),
        )
        ctx = trace.set_span_in_context(span)
        ctx = otel_context.set_value(_RUN_KEY, self, ctx)
        ctx = otel_context.set_value(_STEP_KEY, None, ctx)
        return span, ctx

    @property
    def run_id(self) -> str:
        """The id the sidecar knows the run by: the explicit `run_id`, else the trace id."""
        return self.explicit_run_id if self.explicit_run_id is not None else self.trace_id

    def fail(self, reason: str | None = None, *, final_answer: str | None = None) -> None:
        """Mark the run failed (root status ERROR, `faultfinder.run.outcome=failure`)."""
        span = self._live_span()
        self.outcome = "failure"
        span.set_attribute(c.RUN_OUTCOME, "failure")
        if reason is not None:
            span.set_attribute(c.RUN_OUTCOME_REASON, reason)
        if final_answer is not None:
            span.set_attribute(c.RUN_FINAL_ANSWER, final_answer)
        span.set_status(Status(StatusCode.ERROR, reason or "run failed"))

    def succeed(self, final_answer: str | None = None) -> None:
        """Mark the run successful, with the answer it produced."""
        span = self._live_span()
        self.outcome = "success"
        span.set_attribute(c.RUN_OUTCOME, "success")
        if final_answer is not None:
            span.set_attribute(c.RUN_FINAL_ANSWER, final_answer)
        # The status stays UNSET: OpenTelemetry freezes an OK status, and a later
        # exception in the block must still be able to mark the run failed.

    def answer(self, final_answer: str) -> None:
        """Record the run's answer without a verdict (grade it later with `post_outcome`)."""
        self._live_span().set_attribute(c.RUN_FINAL_ANSWER, final_answer)

    def _finish(self, span: Span, exc: BaseException | None) -> None:
        if exc is None:
            return
        description = _record_error(span, exc)
        if self.outcome != "failure":
            self.outcome = "failure"
            span.set_attribute(c.RUN_OUTCOME, "failure")
            span.set_attribute(c.RUN_OUTCOME_REASON, description)


class AgentStep(_Scope):
    """One turn of an agent (`invoke_agent` span); `say()` records what it answered.

    A turn that contains no other step is one step of the trajectory. A turn that
    contains steps (tool calls, handoffs, nested agents) is their container: each of
    its `say()` texts then becomes a message step of its own, at the time it was said,
    so the trajectory reads say → tool → say in the order things happened.
    """

    def __init__(
        self,
        name: str,
        content: str | None = None,
        *,
        input: str | None = None,
        agent_id: str | None = None,
    ) -> None:
        super().__init__()
        if not name or not name.strip():
            raise ValueError("agent_step needs the agent's name")
        self.name = name
        self.agent_id = agent_id
        self._initial_content = content
        self._initial_input = input
        self._said: list[tuple[int, str]] = []
        self._inputs: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._has_child_steps = False

    def _start(self) -> tuple[Span, Context]:
        _note_step_started()
        attributes = {
            c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT,
            c.GEN_AI_AGENT_NAME: self.name,
            **_run_attributes(),
        }
        if self.agent_id is not None:
            attributes[c.GEN_AI_AGENT_ID] = self.agent_id
        span = _tracer().start_span(
            f"{c.OP_INVOKE_AGENT} {self.name}",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=_clock.now(),
        )
        ctx = otel_context.set_value(_STEP_KEY, self, trace.set_span_in_context(span))
        return span, ctx

    def __enter__(self) -> Self:
        super().__enter__()
        if self._initial_input is not None:
            self.input(self._initial_input)
        if self._initial_content is not None:
            self.say(self._initial_content)
        return self

    @property
    def said(self) -> tuple[str, ...]:
        """Everything the agent said in this step so far."""
        with self._lock:
            return tuple(text for _, text in self._said)

    def say(self, text: object) -> None:
        """Record output of the agent (appended to `gen_ai.output.messages`)."""
        span = self._live_span()
        with self._lock:
            self._said.append((_clock.now(), _text(text)))
            messages = _messages("assistant", [said for _, said in self._said])
        span.set_attribute(c.GEN_AI_OUTPUT_MESSAGES, messages)

    def input(self, text: object, *, role: str = "user") -> None:
        """Record input the agent received (appended to `gen_ai.input.messages`)."""
        span = self._live_span()
        with self._lock:
            self._inputs.append((role, _text(text)))
            messages = json.dumps(
                [
                    {"role": who, "parts": [{"type": "text", "content": what}]}
                    for who, what in self._inputs
                ],
                ensure_ascii=False,
            )
        span.set_attribute(c.GEN_AI_INPUT_MESSAGES, messages)

    def _finish(self, span: Span, exc: BaseException | None) -> None:
        if not self._has_child_steps:
            super()._finish(span, exc)
            _mark_as_step_error(exc)
            return
        parent = trace.set_span_in_context(span)
        with self._lock:
            said = list(self._said)
        for at, text in said:
            self._child_step(parent, at, _messages("assistant", [text]))
        if exc is not None and not _is_step_error(exc):
            # The turn is a container, invisible in the trajectory: its crash needs a
            # step of its own, unless a nested step already shows this exception.
            at = _clock.now()
            error_step = self._child_step(
                parent, at, _messages("assistant", [_describe(exc)]), end=False
            )
            _record_error(error_step, exc)
            error_step.end(end_time=at)
            _mark_as_step_error(exc)
        super()._finish(span, exc)

    def _child_step(self, parent: Context, at: int, output: str, *, end: bool = True) -> Span:
        child = _tracer().start_span(
            f"message {self.name}",
            context=parent,
            attributes={
                c.STEP_KIND: c.STEP_KIND_MESSAGE,
                c.GEN_AI_AGENT_NAME: self.name,
                c.GEN_AI_OUTPUT_MESSAGES: output,
                **_run_attributes(),
            },
            start_time=at,
        )
        if end:
            child.end(end_time=at)
        return child


class ToolCall(_Scope):
    """One tool execution (`execute_tool` span); `result()` records what it returned.

    An exception escaping the block marks the call failed (status ERROR, `error.type`,
    the exception recorded) and is re-raised.
    """

    def __init__(
        self,
        name: str,
        arguments: object = None,
        *,
        call_id: str | None = None,
        agent: str | None = None,
    ) -> None:
        super().__init__()
        if not name or not name.strip():
            raise ValueError("tool_call needs the tool's name")
        self.name = name
        self.arguments = arguments
        self.call_id = call_id
        self.agent = agent
        self.value: object = None
        """The result recorded with `result()`."""

    def _start(self) -> tuple[Span, Context]:
        _note_step_started()
        attributes = {
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
            c.GEN_AI_TOOL_NAME: self.name,
            **_run_attributes(),
        }
        if self.arguments is not None:
            attributes[c.GEN_AI_TOOL_CALL_ARGUMENTS] = _text(self.arguments)
        if self.call_id is not None:
            attributes[c.GEN_AI_TOOL_CALL_ID] = self.call_id
        if self.agent is not None:
            attributes[c.GEN_AI_AGENT_NAME] = self.agent
        span = _tracer().start_span(
            f"{c.OP_EXECUTE_TOOL} {self.name}",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=_clock.now(),
        )
        return span, trace.set_span_in_context(span)

    def result(self, value: object) -> None:
        """Record the tool's result (`gen_ai.tool.call.result`, JSON unless a string)."""
        self.value = value
        self._live_span().set_attribute(c.GEN_AI_TOOL_CALL_RESULT, _text(value))

    def _finish(self, span: Span, exc: BaseException | None) -> None:
        super()._finish(span, exc)
        _mark_as_step_error(exc)


def run(
    task: str,
    *,
    ground_truth: str | None = None,
    run_id: str | None = None,
    framework: str | None = None,
) -> Run:
    """`with run(task=…) as r:` — record one run of the agent system (the root span)."""
    return Run(task, ground_truth=ground_truth, run_id=run_id, framework=framework)


def agent_step(
    name: str,
    content: str | None = None,
    *,
    input: str | None = None,
    agent_id: str | None = None,
) -> AgentStep:
    """`with agent_step("Planner") as s:` — record one turn of agent `name`."""
    return AgentStep(name, content, input=input, agent_id=agent_id)


def tool_call(
    name: str,
    arguments: object = None,
    *,
    call_id: str | None = None,
    agent: str | None = None,
) -> ToolCall:
    """`with tool_call("search", {"q": …}) as call:` — record one tool execution.

    The agent is the enclosing agent step's, unless `agent` names one.
    """
    return ToolCall(name, arguments, call_id=call_id, agent=agent)


def _instant_step(name: str, attributes: dict[str, str]) -> None:
    """A step that happens at one instant (a message, a handoff): a zero-length span."""
    _note_step_started()
    at = _clock.now()
    span = _tracer().start_span(
        name, kind=SpanKind.INTERNAL, attributes={**attributes, **_run_attributes()}, start_time=at
    )
    span.end(end_time=at)


def handoff(source: str, target: str, message: str) -> None:
    """Record agent `source` passing control to agent `target` with `message`."""
    _instant_step(
        f"handoff {source} -> {target}",
        {
            c.STEP_KIND: c.STEP_KIND_HANDOFF,
            c.GEN_AI_AGENT_NAME: source,
            c.HANDOFF_TARGET: target,
            c.GEN_AI_OUTPUT_MESSAGES: _messages("assistant", [message]),
        },
    )


_ROLE_KINDS = {
    "user": c.STEP_KIND_HUMAN,
    "human": c.STEP_KIND_HUMAN,
    "system": c.STEP_KIND_SYSTEM,
    "tool": c.STEP_KIND_TOOL,
}


def message(agent: str, text: str, *, role: str = "assistant") -> None:
    """Record a plain message by `agent` as one step (role `user` makes it a human step)."""
    _instant_step(
        f"message {agent}",
        {
            c.STEP_KIND: _ROLE_KINDS.get(role.strip().lower(), c.STEP_KIND_MESSAGE),
            c.GEN_AI_AGENT_NAME: agent,
            c.GEN_AI_OUTPUT_MESSAGES: _messages(role, [text]),
        },
    )


# --- decorators -------------------------------------------------------------------------------

P = ParamSpec("P")
R = TypeVar("R")


def _refuse_generators(fn: Callable[..., Any], decorator: str, helper: str) -> None:
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"@{decorator} cannot wrap generator {fn.__qualname__}: its step would end before "
            f"it yields; use `with {helper}(…)` inside it instead"
        )


def agent(name: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`@agent("Planner")` — each call of the function (sync or async) is one agent step;
    its return value, unless None, is what the agent said."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        _refuse_generators(fn, "agent", "agent_step")
        step_name = name or fn.__name__
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def call_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                async with AgentStep(step_name) as step:
                    result = await fn(*args, **kwargs)
                    if result is not None:
                        step.say(result)
                    return result

            return cast(Callable[P, R], call_async)

        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            with AgentStep(step_name) as step:
                result = fn(*args, **kwargs)
                if result is not None:
                    step.say(result)
                return result

        return call

    return decorate


def tool(name: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`@tool("search")` — each call of the function (sync or async) is one tool call,
    with its arguments and return value recorded."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        _refuse_generators(fn, "tool", "tool_call")
        tool_name = name or fn.__name__
        signature = inspect.signature(fn)

        def arguments(*args: Any, **kwargs: Any) -> dict[str, Any]:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return {}  # the call itself raises the TypeError, recorded on the span
            return {k: v for k, v in bound.arguments.items() if k not in ("self", "cls")}

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def call_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                async with ToolCall(tool_name, arguments(*args, **kwargs)) as call:
                    result = await fn(*args, **kwargs)
                    call.result(result)
                    return result

            return cast(Callable[P, R], call_async)

        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            with ToolCall(tool_name, arguments(*args, **kwargs)) as recorded:
                result = fn(*args, **kwargs)
                recorded.result(result)
                return result

        return call

    return decorate
