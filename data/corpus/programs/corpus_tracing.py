"""OpenTelemetry set-up shared by the corpus programs: the SDK's tracer provider with the
standard OTLP/HTTP exporter, configured by the standard environment variables
(`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`)."""

from __future__ import annotations

import os

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

__all__ = ["tracer_provider"]


def tracer_provider(service_name: str) -> TracerProvider:
    """A provider exporting every span over OTLP/HTTP; call `shutdown()` before exiting
    so that the spans still queued are sent."""
    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    # Resource.create adds OTEL_RESOURCE_ATTRIBUTES (the project, the run's labels).
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider
