"""The SDK recording into memory, and the runs it recorded read back as the sidecar reads
them (real OTLP bytes, the server's decoder and assembler)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from faultfinder.attributors.model import StepKind, Trajectory
from faultfinder.reading.assembler import assemble_trajectory
from faultfinder.reading.model import SpanRecord
from faultfinder.reading.runs import run_facts
from faultfinder.sdk import configure, shutdown
from tests.otlp_helpers import span_records


@contextmanager
def recording(**options: Any) -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    """The SDK configured to export every span, as it ends, into memory."""
    memory = InMemorySpanExporter()
    provider = configure(exporter=memory, batch=False, set_global=False, **options)
    try:
        yield memory, provider
    finally:
        shutdown()


def records(exporter: InMemorySpanExporter) -> list[SpanRecord]:
    return span_records(exporter.get_finished_spans())


def trajectory(exporter: InMemorySpanExporter, run_id: str) -> Trajectory:
    """The run's trajectory, grouping spans into runs exactly as the sidecar does."""
    spans = [span for span in records(exporter) if run_facts(span).run_id == run_id]
    assert spans, f"no span of run {run_id}"
    return assemble_trajectory(run_id, spans)


def root_of(exporter: InMemorySpanExporter, trace_id: str) -> SpanRecord:
    (root,) = [
        span
        for span in records(exporter)
        if span.trace_id == trace_id and span.parent_span_id is None
    ]
    return root


def steps(trajectory: Trajectory) -> list[tuple[str, StepKind, str]]:
    return [(step.agent, step.kind, step.content) for step in trajectory.steps]


def finished_span(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    (span,) = [span for span in exporter.get_finished_spans() if span.name == name]
    return span
