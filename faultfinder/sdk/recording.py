"""What every recording helper shares: the provider `configure()` set and its tracer, a
clock that never repeats, the context keys of the current run and step, and `Scope`, the
span a `with` block makes current.
"""

from __future__ import annotations

import threading
import time
from contextvars import Token
from types import TracebackType
from typing import Any, Self

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span

from faultfinder import __version__
from faultfinder.sdk.attributes import record_error

_TRACER_NAME = "faultfinder.sdk"

RUN_KEY = otel_context.create_key("faultfinder-run")
"""Context key of the `Run` whose block is running."""
STEP_KEY = otel_context.create_key("faultfinder-agent-step")
"""Context key of the `AgentStep` whose block is running (None inside a run's own block)."""

_provider: TracerProvider | None = None
"""The provider the helpers record into; set by `configure()`."""


def use_provider(provider: TracerProvider) -> None:
    """Record the helpers' spans into `provider` from now on."""
    global _provider
    _provider = provider


def release_provider() -> TracerProvider | None:
    """Stop recording into the configured provider, and return it (None: none was set)."""
    global _provider
    provider, _provider = _provider, None
    return provider


def configured_provider() -> TracerProvider | None:
    """The provider `configure()` set, if any."""
    return _provider


def tracer() -> trace.Tracer:
    """The tracer of the configured provider, else of the global OpenTelemetry one."""
    provider = _provider if _provider is not None else trace.get_tracer_provider()
    return provider.get_tracer(_TRACER_NAME, __version__)


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


clock = _Clock()


class Scope:
    """A span that is current while its `with` / `async with` block runs."""

    def __init__(self) -> None:
        self._span: Span | None = None
        self._token: Token[Context] | None = None
        self._ended = False

    def _start(self) -> tuple[Span, Context]:
        raise NotImplementedError

    def _finish(self, span: Span, exc: BaseException | None) -> None:
        if exc is not None:
            record_error(span, exc)

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
            span.end(end_time=clock.now())
            if self._token is not None:
                otel_context.detach(self._token)

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(self, *exc_info: Any) -> None:
        self.__exit__(*exc_info)
