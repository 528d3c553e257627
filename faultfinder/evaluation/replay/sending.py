"""Replaying records: each one exported as one trace through a real OTLP exporter,
flushed before the next, with what was delivered counted."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from faultfinder import conventions as c
from faultfinder.attributors.model import Trajectory
from faultfinder.datasets import BenchmarkRecord
from faultfinder.evaluation.replay.exporters import DeliveryCount, Protocol, build_exporter
from faultfinder.evaluation.replay.spans import trajectory_spans
from faultfinder.server.progress import Progress

REPLAY_SERVICE_NAME = "faultfinder-replay"


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What a replay delivered."""

    records: int
    spans: int
    """Spans the exporter delivered."""
    failures: int
    """Export calls that failed."""
    failed_spans: int = 0
    """Spans in the failed export calls."""


def replay_records(
    records: Iterable[BenchmarkRecord | Trajectory],
    exporter: SpanExporter,
    *,
    project: str | None = None,
    on_record: Callable[[int], None] | None = None,
) -> ReplayResult:
    """Replay every record as one trace through `exporter`, then shut it down.

    The provider is flushed after each record, so a record's spans are delivered (and
    counted) before the next one starts and the span queue never overflows.
    `on_record(spans)` is called after each record is flushed.
    """
    resource_attributes: dict[str, str] = {"service.name": REPLAY_SERVICE_NAME}
    if project:
        resource_attributes[c.PROJECT_NAME] = project
    counted = DeliveryCount(exporter)
    provider = TracerProvider(
        resource=Resource.create(resource_attributes),
        # Who&When steps run to tens of KB; the whole text must arrive.
        span_limits=SpanLimits(
            max_attribute_length=SpanLimits.UNSET,
            max_span_attribute_length=SpanLimits.UNSET,
        ),
    )
    provider.add_span_processor(
        BatchSpanProcessor(counted, max_queue_size=1 << 16, max_export_batch_size=512)
    )
    tracer = provider.get_tracer("faultfinder.evaluation.replay")
    replayed = 0
    try:
        for item in records:
            produced = trajectory_spans(item, tracer)
            provider.force_flush()
            replayed += 1
            if on_record:
                on_record(produced)
    finally:
        provider.shutdown()
    return ReplayResult(
        records=replayed,
        spans=counted.spans,
        failures=counted.failures,
        failed_spans=counted.failed_spans,
    )


def _progress(console: Console, enabled: bool) -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[spans]} spans"),
        TimeElapsedColumn(),
        console=console,
        disable=not enabled,
    )


def replay(
    records: Iterable[BenchmarkRecord | Trajectory],
    *,
    to: str,
    protocol: Protocol | str = Protocol.HTTP_PROTOBUF,
    project: str | None = None,
    headers: Mapping[str, str] | None = None,
    progress: bool = True,
    timeout: float = 10.0,
) -> ReplayResult:
    """Replay `records` to the OTLP receiver at `to`, with a progress bar on stderr."""
    items = list(records)
    exporter = build_exporter(to, protocol, headers=headers, timeout=timeout)
    with _progress(Console(stderr=True), progress) as bar:
        task = bar.add_task("replaying", total=len(items), spans=0)
        produced = 0

        def advance(spans: int) -> None:
            nonlocal produced
            produced += spans
            bar.update(task, advance=1, spans=produced)

        return replay_records(items, exporter, project=project, on_record=advance)
