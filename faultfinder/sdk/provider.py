"""The provider the helpers record into: `configure()` builds (or extends) it with the
export to the sidecar; `flush()` and `shutdown()` end its work.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter

from faultfinder import conventions as c
from faultfinder.sdk.errors import ConfigurationError
from faultfinder.sdk.export import export_target, otlp_exporter
from faultfinder.sdk.recording import configured_provider, release_provider, use_provider
from faultfinder.sdk.runs import RunIdStamp

__all__ = ["DEFAULT_SERVICE_NAME", "configure", "flush", "shutdown"]

DEFAULT_SERVICE_NAME = "agents"
"""`service.name` when neither `service_name` nor `OTEL_SERVICE_NAME` gives one."""


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
    if tracer_provider is not None and (service_name is not None or project is not None):
        raise ConfigurationError(
            "service_name and project describe a new provider's Resource; with "
            "tracer_provider=…, set them on the Resource of the provider you pass"
        )
    if exporter is None:
        exporter = otlp_exporter(export_target(endpoint, headers=headers, protocol=protocol))
    provider = tracer_provider or TracerProvider(
        resource=_resource(service_name, project), span_limits=_span_limits()
    )
    provider.add_span_processor(RunIdStamp())
    provider.add_span_processor(
        BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    )
    use_provider(provider)
    if set_global and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)
    return provider


def flush(timeout_seconds: float = 30.0) -> bool:
    """Export every finished span now; False when the export did not finish in time."""
    provider = configured_provider() or trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is None:
        return True
    return bool(force_flush(int(timeout_seconds * 1000)))


def shutdown() -> None:
    """Flush and stop the provider `configure()` set up (yours, if you passed one); spans
    recorded afterwards are dropped."""
    provider = release_provider()
    if provider is not None:
        provider.shutdown()
