"""`faultfinder bench replay`: benchmark trajectories turned into real OpenTelemetry spans and
exported over OTLP (http/protobuf, http/json or gRPC), one trace per record."""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import click
import httpx
from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode, Tracer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from faultfinder import conventions as c
from faultfinder.attributors.model import Step, StepKind, StepStatus, Trajectory
from faultfinder.benchmarks.datasets import (
    DATASETS_DIR_ENV,
    BenchmarkRecord,
    DatasetError,
    load_dataset,
    resolve_datasets_dir,
)
from faultfinder.benchmarks.otlp_traces import (
    JSON_CONTENT_TYPE,
    request_to_otlp_json,
    retry_after_seconds,
    traces_url,
)
from faultfinder.server.progress import Progress

_log = logging.getLogger(__name__)

REPLAY_SERVICE_NAME = "faultfinder-replay"
STEP_NS = 1_000_000
"""Replayed steps start 1 ms apart, so time order equals step order."""
DEFAULT_GRPC_PORT = 4317
_RETRYABLE_STATUS = frozenset({429, 502, 503, 504})

# Who&When subsets come from two agent frameworks (see the dataset's SOURCE.md).
_SUBSET_FRAMEWORK = {"algorithm-generated": "ag2", "hand-crafted": "magentic-one"}

_MESSAGE_ROLE = {
    StepKind.HUMAN: "user",
    StepKind.SYSTEM: "system",
    StepKind.TOOL: "tool",
}


class Protocol(StrEnum):
    """OTLP transport, spelled as in OTEL_EXPORTER_OTLP_PROTOCOL."""

    HTTP_PROTOBUF = "http/protobuf"
    HTTP_JSON = "http/json"
    GRPC = "grpc"


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


# --- Trajectory → spans --------------------------------------------------------------


def _utf8(text: str) -> str:
    # Protobuf strings must be valid UTF-8; a lone surrogate would fail the whole batch.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def output_messages(role: str, content: str) -> str:
    """GenAI-semconv `gen_ai.output.messages` JSON holding `content` as one text part."""
    messages = [{"role": role, "parts": [{"type": "text", "content": content}]}]
    text = json.dumps(messages, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # \u escapes keep a lone surrogate intact for any JSON reader.
        return json.dumps(messages, ensure_ascii=True)
    return text


_STEP_OPERATION: dict[StepKind, str | None] = {
    StepKind.MESSAGE: c.OP_INVOKE_AGENT,
    StepKind.HANDOFF: c.OP_INVOKE_AGENT,
    StepKind.LLM: c.OP_CHAT,
    StepKind.TOOL: c.OP_EXECUTE_TOOL,
    # GenAI semconv has no operation for a human or system turn; STEP_KIND says it.
    StepKind.HUMAN: None,
    StepKind.SYSTEM: None,
}


def _step_span_name(step: Step, operation: str | None) -> str:
    if operation == c.OP_EXECUTE_TOOL:
        return f"{operation} {step.tool_name or step.agent}"
    return f"{operation or step.kind.value} {step.agent}"


def step_attributes(step: Step) -> dict[str, Any]:
    """Span attributes of one replayed step."""
    attributes: dict[str, Any] = {
        c.STEP_INDEX: step.index,
        c.STEP_KIND: step.kind.value,
        c.GEN_AI_AGENT_NAME: _utf8(step.agent),
        c.GEN_AI_OUTPUT_MESSAGES: output_messages(
            _MESSAGE_ROLE.get(step.kind, "assistant"), step.content
        ),
    }
    operation = _STEP_OPERATION.get(step.kind, c.OP_INVOKE_AGENT)
    if operation is not None:
        attributes[c.GEN_AI_OPERATION_NAME] = operation
    if step.role is not None:
        attributes[c.STEP_ROLE] = _utf8(step.role)
    if step.tool_name is not None:
        attributes[c.GEN_AI_TOOL_NAME] = _utf8(step.tool_name)
    if step.tool_arguments is not None:
        attributes[c.GEN_AI_TOOL_CALL_ARGUMENTS] = _utf8(step.tool_arguments)
    if step.tool_result is not None:
        attributes[c.GEN_AI_TOOL_CALL_RESULT] = _utf8(step.tool_result)
    return attributes


def _root_attributes(record: BenchmarkRecord | None, trajectory: Trajectory) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_WORKFLOW,
        c.RUN_TASK: _utf8(trajectory.task),
        c.RUN_OUTCOME: "failure",
    }
    if trajectory.ground_truth is not None:
        attributes[c.RUN_GROUND_TRUTH] = _utf8(trajectory.ground_truth)
    if trajectory.final_answer:
        attributes[c.RUN_FINAL_ANSWER] = _utf8(trajectory.final_answer)
    framework = trajectory.metadata.get("framework")
    if framework is None and record is not None:
        framework = _SUBSET_FRAMEWORK.get(record.subset)
    if framework:
        attributes[c.RUN_FRAMEWORK] = str(framework)
    if record is not None:
        attributes[c.DATASET_NAME] = record.dataset
        attributes[c.DATASET_RECORD] = record.record_id
        attributes[c.LABEL_AGENT] = _utf8(record.gold.agent)
        attributes[c.LABEL_STEP] = record.gold.step
        attributes[c.LABEL_REASON] = _utf8(record.gold.reason)
    return attributes


def trajectory_spans(
    record_or_trajectory: BenchmarkRecord | Trajectory,
    tracer: Tracer,
    *,
    start_ns: int | None = None,
) -> int:
    """Record one run as spans on `tracer`: a root span and one child per step, in order.

    Steps get explicit timestamps `STEP_NS` apart from `start_ns` (default: so that the
    root ends now); the root span ends after every step. Returns the number of spans.
    """
    if isinstance(record_or_trajectory, BenchmarkRecord):
        record: BenchmarkRecord | None = record_or_trajectory
        trajectory = record_or_trajectory.trajectory
        run_name = f"{record_or_trajectory.dataset}/{record_or_trajectory.record_id}"
    else:
        record, trajectory = None, record_or_trajectory
        run_name = trajectory.run_id
    steps = trajectory.steps
    base = start_ns if start_ns is not None else time.time_ns() - (len(steps) + 2) * STEP_NS

    root = tracer.start_span(
        f"run {run_name}",
        context=Context(),  # a fresh trace, whatever span is current
        attributes=_root_attributes(record, trajectory),
        start_time=base,
    )
    parent = trace_api.set_span_in_context(root, Context())
    for step in steps:
        step_start = base + (step.index + 1) * STEP_NS
        attributes = step_attributes(step)
        span = tracer.start_span(
            _step_span_name(step, attributes.get(c.GEN_AI_OPERATION_NAME)),
            context=parent,
            attributes=attributes,
            start_time=step_start,
        )
        if step.status is StepStatus.ERROR:
            span.set_status(Status(StatusCode.ERROR, step.error or None))
        elif step.status is StepStatus.OK:
            span.set_status(Status(StatusCode.OK))
        span.end(end_time=step_start + STEP_NS // 2)
    # The status description deliberately carries no gold label: attributors may read it.
    root.set_status(Status(StatusCode.ERROR, "run failed: the final answer was judged incorrect"))
    root.end(end_time=base + (len(steps) + 1) * STEP_NS)
    return len(steps) + 1


# --- Exporters -----------------------------------------------------------------------


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


# --- Replay --------------------------------------------------------------------------


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
    tracer = provider.get_tracer("faultfinder.benchmarks.replay")
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


@click.command(name="replay")
@click.option(
    "--dataset",
    "spec",
    required=True,
    help="Dataset spec: who_and_when, who_and_when:algorithm-generated, who_and_when:hand-crafted.",
)
@click.option(
    "--to", required=True, help="Base URL of the OTLP receiver, e.g. http://127.0.0.1:4318."
)
@click.option(
    "--protocol",
    type=click.Choice([p.value for p in Protocol]),
    default=Protocol.HTTP_PROTOBUF.value,
    show_default=True,
    help="OTLP transport (gRPC takes host:port from --to).",
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Replay at most N records.")
@click.option("--project", default=None, help="Project name (resource attribute).")
@click.option("--headers", default=None, help="Extra request headers: k=v,k2=v2.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds per export, retries included.",
)
@click.option(
    "--datasets-dir",
    type=click.Path(file_okay=False, path_type=str),
    envvar=DATASETS_DIR_ENV,
    default=None,
    help=f"Dataset root (default ${DATASETS_DIR_ENV} or ../shared/datasets).",
)
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def replay_command(
    spec: str,
    to: str,
    protocol: str,
    limit: int | None,
    project: str | None,
    headers: str | None,
    timeout: float,
    datasets_dir: str | None,
    no_progress: bool,
) -> None:
    """Replay a benchmark dataset as OTLP traces (one trace per record) into a receiver."""
    try:
        extra_headers = parse_headers(headers)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--headers") from error
    try:
        records = list(
            itertools.islice(load_dataset(spec, root=resolve_datasets_dir(datasets_dir)), limit)
        )
    except DatasetError as error:
        raise click.ClickException(str(error)) from error
    if not records:
        raise click.ClickException(f"dataset {spec!r} has no records")
    try:
        result = replay(
            records,
            to=to,
            protocol=protocol,
            project=project,
            headers=extra_headers,
            progress=not no_progress,
            timeout=timeout,
        )
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--to") from error
    click.echo(
        f"replayed {result.records} records: {result.spans} spans sent, "
        f"{result.failures} export failures ({result.failed_spans} spans not delivered)"
    )
    if result.failures:
        raise SystemExit(1)
