"""Where spans go: the OTLP target `configure()` exports to, resolved from its arguments,
the `FAULTFINDER_*` variables and the standard `OTEL_EXPORTER_OTLP_*` ones, and the
exporter for it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.util.re import parse_env_headers

from faultfinder.sdk.errors import ConfigurationError

__all__ = [
    "API_KEY_VARIABLE",
    "DEFAULT_GRPC_ENDPOINT",
    "DEFAULT_HTTP_ENDPOINT",
    "ENDPOINT_VARIABLE",
    "PROTOCOLS",
    "ExportTarget",
    "export_target",
]

DEFAULT_HTTP_ENDPOINT = "http://127.0.0.1:4318"
"""Where spans go over OTLP/HTTP when neither an argument nor the environment says."""
DEFAULT_GRPC_ENDPOINT = "http://127.0.0.1:4317"
"""Where spans go over OTLP/gRPC when neither an argument nor the environment says."""
PROTOCOLS = ("http/protobuf", "grpc")
"""OTLP transports `configure()` can export over."""

ENDPOINT_VARIABLE = "FAULTFINDER_ENDPOINT"
"""The sidecar's base URL, for spans (before the `OTEL_*` variables) and for `Client`."""
API_KEY_VARIABLE = "FAULTFINDER_API_KEY"
"""An API key of the sidecar, sent by `configure()`'s exporter and by `Client`."""
TRACES_PATH = "/v1/traces"


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


def otlp_exporter(target: ExportTarget) -> SpanExporter:
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
