"""OTLP span exporters for a replay: the SDK's http/protobuf and gRPC exporters, an
http/json one, a wrapper counting what was delivered, and the `k=v` header syntax of
OTEL_EXPORTER_OTLP_HEADERS."""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from enum import StrEnum

import httpx
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from faultfinder.evaluation.replay.otlp_http import (
    JSON_CONTENT_TYPE,
    retry_after_seconds,
    traces_url,
)
from faultfinder.server.otlp.otlp_json import request_to_otlp_json

_log = logging.getLogger(__name__)

DEFAULT_GRPC_PORT = 4317
_RETRYABLE_STATUS = frozenset({429, 502, 503, 504})


class Protocol(StrEnum):
    """OTLP transport, spelled as in OTEL_EXPORTER_OTLP_PROTOCOL."""

    HTTP_PROTOBUF = "http/protobuf"
    HTTP_JSON = "http/json"
    GRPC = "grpc"


class OTLPJsonSpanExporter(SpanExporter):
    """OTLP/HTTP with JSON bodies (the SDK ships only protobuf).

    Retries 429/502/503/504 and connection errors, honouring Retry-After, within `timeout`.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        max_attempts: int = 6,
    ) -> None:
        self.endpoint = endpoint
        self._timeout = timeout
        self._max_attempts = max_attempts
        self._client = httpx.Client(
            timeout=timeout,
            headers={**(headers or {}), "content-type": JSON_CONTENT_TYPE},
        )
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            return SpanExportResult.FAILURE
        body = request_to_otlp_json(encode_spans(spans))
        deadline = time.monotonic() + self._timeout
        for attempt in range(self._max_attempts):
            delay = min(2.0**attempt * 0.25, 8.0)
            try:
                response = self._client.post(self.endpoint, content=body)
            except httpx.HTTPError as error:
                _log.warning("OTLP/JSON export to %s failed: %s", self.endpoint, error)
            else:
                if response.is_success:
                    return SpanExportResult.SUCCESS
                if response.status_code not in _RETRYABLE_STATUS:
                    _log.error(
                        "OTLP/JSON export to %s rejected: HTTP %d %s",
                        self.endpoint,
                        response.status_code,
                        response.text[:500],
                    )
                    return SpanExportResult.FAILURE
                delay = retry_after_seconds(response.headers.get("retry-after"), default=delay)
            if time.monotonic() + delay > deadline:
                break
            time.sleep(delay)
        _log.error("OTLP/JSON export to %s gave up after retries", self.endpoint)
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._closed = True
        self._client.close()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class DeliveryCount(SpanExporter):
    """Wraps an exporter and counts delivered spans and failed export calls."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.spans = 0
        self.failures = 0
        self.failed_spans = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:
            _log.exception("span exporter raised")
            result = SpanExportResult.FAILURE
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.spans += len(spans)
            else:
                self.failures += 1
                self.failed_spans += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def grpc_target(to: str) -> str:
    """`host:port` for the gRPC exporter from a URL or a bare `host[:port]`."""
    netloc = urllib.parse.urlsplit(to).netloc if "://" in to else to.strip("/")
    if not netloc:
        raise ValueError(f"--to {to!r} names no host")
    host, _, port = netloc.rpartition(":")
    if not host or not port.isdigit() or netloc.endswith("]"):
        return f"{netloc}:{DEFAULT_GRPC_PORT}"
    return netloc


def build_exporter(
    to: str,
    protocol: Protocol | str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> SpanExporter:
    """A real OTLP exporter towards `to` (a base URL; `/v1/traces` is added for HTTP)."""
    protocol = Protocol(protocol)
    if protocol is Protocol.HTTP_PROTOBUF:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpSpanExporter,
        )

        return HttpSpanExporter(
            endpoint=traces_url(to), headers=dict(headers or {}), timeout=timeout
        )
    if protocol is Protocol.HTTP_JSON:
        return OTLPJsonSpanExporter(traces_url(to), headers=headers, timeout=timeout)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcSpanExporter,
    )

    # gRPC metadata keys must be lowercase.
    metadata = {key.lower(): value for key, value in (headers or {}).items()}
    return GrpcSpanExporter(
        endpoint=grpc_target(to), insecure=True, headers=metadata or None, timeout=timeout
    )


def parse_headers(value: str | None) -> dict[str, str]:
    """`k=v,k2=v2` (values percent-decoded, as in OTEL_EXPORTER_OTLP_HEADERS) → dict."""
    headers: dict[str, str] = {}
    if not value:
        return headers
    for item in value.split(","):
        if not item.strip():
            continue
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"header {item.strip()!r} is not of the form key=value")
        headers[key.strip()] = urllib.parse.unquote(val.strip())
    return headers
