"""`faultfinder bench replay`: benchmark trajectories as real OpenTelemetry spans over OTLP."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from faultfinder import conventions as c
from faultfinder.attributors.model import Step, StepKind, StepStatus, Trajectory
from faultfinder.cli.bench import bench
from faultfinder.datasets import (
    BenchmarkRecord,
    GoldLabel,
    load_dataset,
    resolve_datasets_dir,
)
from faultfinder.evaluation.replay import ReplayResult, replay, replay_records
from tests.integration.test_ingest_bench import OtlpSink, running_sink

LONG_CONTENT = "Zürich — 東京 ✓ naïve café; " * 2000  # ~54 KB, far past any default limit


def _record(record_id: str = "algorithm-generated/1") -> BenchmarkRecord:
    steps = (
        Step(index=0, agent="human", kind=StepKind.HUMAN, role="human", content="Find the café."),
        Step(
            index=1,
            agent="Orchestrator",
            kind=StepKind.HANDOFF,
            role="Orchestrator (-> WebSurfer)",
            content="Please search for the opening hours.",
        ),
        Step(index=2, agent="WebSurfer", kind=StepKind.MESSAGE, content=LONG_CONTENT),
        Step(
            index=3,
            agent="ComputerTerminal",
            kind=StepKind.TOOL,
            content="exitcode: 1",
            tool_name="python",
            tool_arguments='{"code": "print(hours)"}',
            tool_result="NameError: name 'hours' is not defined",
            status=StepStatus.ERROR,
            error="exit code 1",
        ),
        Step(index=4, agent="Assistant", kind=StepKind.MESSAGE, content=""),
    )
    trajectory = Trajectory(
        run_id=f"who_and_when/{record_id}",
        task="When does the café open?",
        ground_truth="8 am",
        final_answer="9 am",
        steps=steps,
        metadata={"framework": "magentic-one"},
    )
    gold = GoldLabel(agent="WebSurfer", step=2, reason="Read the wrong page.")
    return BenchmarkRecord("who_and_when", "algorithm-generated", record_id, trajectory, gold)


def _replayed(*records: BenchmarkRecord | Trajectory, **kwargs: Any) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    result = replay_records(records, exporter, **kwargs)
    spans = list(exporter.get_finished_spans())
    assert result == ReplayResult(records=len(records), spans=len(spans), failures=0)
    return spans


def _split(spans: list[ReadableSpan]) -> tuple[ReadableSpan, list[ReadableSpan]]:
    (root,) = [span for span in spans if span.parent is None]
    steps = sorted(
        (span for span in spans if span.parent is not None), key=lambda s: s.start_time or 0
    )
    return root, steps


def _content(span: ReadableSpan) -> str:
    attributes = span.attributes or {}
    (message,) = json.loads(str(attributes[c.GEN_AI_OUTPUT_MESSAGES]))
    (part,) = message["parts"]
    assert part["type"] == "text"
    return str(part["content"])


def test_one_trace_per_record_with_one_child_span_per_step_in_time_order() -> None:
    record = _record()
    spans = _replayed(record)
    root, steps = _split(spans)

    assert len(steps) == len(record.trajectory.steps)
    assert {span.context.trace_id for span in spans} == {root.context.trace_id}
    assert all(span.parent.span_id == root.context.span_id for span in steps if span.parent)
    # Time order is step order, without overlaps, all inside the root span.
    assert [(span.attributes or {})[c.STEP_INDEX] for span in steps] == [0, 1, 2, 3, 4]
    for earlier, later in itertools.pairwise(steps):
        assert earlier.end_time is not None and later.start_time is not None
        assert earlier.end_time <= later.start_time
    assert root.start_time is not None and steps[0].start_time is not None
    assert root.start_time <= steps[0].start_time
    assert root.end_time is not None and steps[-1].end_time is not None
    assert root.end_time > steps[-1].end_time
    # The root ends (and is exported) after every step.
    assert spans[-1] is root


def test_step_spans_carry_kind_role_agent_operation_and_verbatim_content() -> None:
    record = _record()
    _, spans = _split(_replayed(record))

    for step, span in zip(record.trajectory.steps, spans, strict=True):
        attributes = span.attributes or {}
        assert attributes[c.STEP_KIND] == step.kind.value
        assert attributes[c.GEN_AI_AGENT_NAME] == step.agent
        assert attributes.get(c.STEP_ROLE) == step.role
        assert _content(span) == step.content

    operations = [(span.attributes or {}).get(c.GEN_AI_OPERATION_NAME) for span in spans]
    # A human turn has no GenAI operation; its STEP_KIND says what it is.
    assert operations == [
        None,
        c.OP_INVOKE_AGENT,
        c.OP_INVOKE_AGENT,
        c.OP_EXECUTE_TOOL,
        c.OP_INVOKE_AGENT,
    ]
    tool = spans[3].attributes or {}
    assert tool[c.GEN_AI_TOOL_NAME] == "python"
    assert tool[c.GEN_AI_TOOL_CALL_ARGUMENTS] == '{"code": "print(hours)"}'
    assert tool[c.GEN_AI_TOOL_CALL_RESULT] == "NameError: name 'hours' is not defined"
    assert spans[3].status.status_code is StatusCode.ERROR
    assert spans[3].status.description == "exit code 1"
    assert _content(spans[2]) == LONG_CONTENT and len(LONG_CONTENT) > 50_000
    assert _content(spans[4]) == ""


def test_root_span_describes_the_failed_run_and_its_gold_label() -> None:
    root, _ = _split(_replayed(_record(), project="bench-project"))
    attributes = root.attributes or {}

    assert root.name == "run who_and_when/algorithm-generated/1"
    assert attributes[c.GEN_AI_OPERATION_NAME] == c.OP_INVOKE_WORKFLOW
    assert attributes[c.RUN_TASK] == "When does the café open?"
    assert attributes[c.RUN_GROUND_TRUTH] == "8 am"
    assert attributes[c.RUN_FINAL_ANSWER] == "9 am"
    assert attributes[c.RUN_FRAMEWORK] == "magentic-one"
    assert attributes[c.RUN_OUTCOME] == "failure"
    assert attributes[c.DATASET_NAME] == "who_and_when"
    assert attributes[c.DATASET_RECORD] == "algorithm-generated/1"
    assert attributes[c.LABEL_AGENT] == "WebSurfer"
    assert attributes[c.LABEL_STEP] == 2
    assert attributes[c.LABEL_REASON] == "Read the wrong page."
    assert root.status.status_code is StatusCode.ERROR and root.status.description
    assert "wrong page" not in root.status.description  # the label stays out of the status
    assert root.resource.attributes["service.name"] == "faultfinder-replay"
    assert root.resource.attributes[c.PROJECT_NAME] == "bench-project"


def test_a_bare_trajectory_replays_without_dataset_or_label_attributes() -> None:
    trajectory = _record().trajectory.model_copy(update={"final_answer": None})
    root, steps = _split(_replayed(trajectory))
    attributes = root.attributes or {}

    assert root.name == f"run {trajectory.run_id}"
    assert len(steps) == 5
    assert c.RUN_FINAL_ANSWER not in attributes
    assert not {c.DATASET_NAME, c.LABEL_AGENT, c.LABEL_STEP} & set(attributes)


def test_content_is_not_truncated_even_when_the_environment_sets_a_length_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "64")
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "64")
    _, steps = _split(_replayed(_record()))

    assert _content(steps[2]) == LONG_CONTENT


def test_each_record_is_its_own_trace() -> None:
    spans = _replayed(_record("hand-crafted/1"), _record("hand-crafted/2"))
    by_trace: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        by_trace.setdefault(span.context.trace_id, []).append(span)

    assert len(by_trace) == 2
    records = set()
    for trace_spans in by_trace.values():
        root, steps = _split(trace_spans)
        records.add((root.attributes or {})[c.DATASET_RECORD])
        assert len(steps) == 5
    assert records == {"hand-crafted/1", "hand-crafted/2"}


def _sink_spans(sink: OtlpSink) -> list[tuple[dict[str, Any], Any]]:
    """(resource attributes, span) for every span the sink received."""
    received: list[tuple[dict[str, Any], Any]] = []
    for request in sink.requests:
        for resource_spans in request.resource_spans:
            resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                received.extend((resource, span) for span in scope_spans.spans)
    return received


def _attributes(span: Any) -> dict[str, Any]:
    return {
        kv.key: getattr(kv.value, kv.value.WhichOneof("value") or "string_value")
        for kv in span.attributes
    }


def test_http_protobuf_replay_delivers_every_span_to_a_real_receiver() -> None:
    with running_sink() as sink:
        result = replay(
            [_record()],
            to=sink.url,
            protocol="http/protobuf",
            project="checkout",
            headers={"x-project-name": "checkout"},
            progress=False,
        )

    assert result == ReplayResult(records=1, spans=6, failures=0)
    received = _sink_spans(sink)
    assert len(received) == 6
    assert {resource[c.PROJECT_NAME] for resource, _ in received} == {"checkout"}
    assert all(headers["x-project-name"] == "checkout" for headers in sink.seen_headers)
    contents = {
        _attributes(span).get(c.STEP_INDEX): _attributes(span).get(c.GEN_AI_OUTPUT_MESSAGES)
        for _, span in received
    }
    assert json.loads(str(contents[2]))[0]["parts"][0]["content"] == LONG_CONTENT


def test_http_json_replay_sends_valid_otlp_json_with_hex_ids() -> None:
    with running_sink() as sink:
        result = replay([_record()], to=sink.url, protocol="http/json", progress=False)

    assert result == ReplayResult(records=1, spans=6, failures=0)
    assert sink.content_types == {"application/json"}
    (body,) = sink.bodies
    document = json.loads(body)
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert len(spans) == 6
    for span in spans:
        assert len(span["traceId"]) == 32 and int(span["traceId"], 16)
        assert len(span["spanId"]) == 16 and int(span["spanId"], 16)
        assert "parentSpanId" not in span or len(span["parentSpanId"]) == 16
    roots = [span for span in spans if "parentSpanId" not in span]
    assert len(roots) == 1 and roots[0]["status"]["code"] == 2  # OTLP/JSON: integer enums
    trace_id = roots[0]["traceId"]

    # Proto3 JSON wants base64 bytes; after converting the ids the body parses as OTLP.
    for span in spans:
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in span:
                span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    request = json_format.Parse(json.dumps(document), ExportTraceServiceRequest())
    parsed = request.resource_spans[0].scope_spans[0].spans
    assert {bytes(span.trace_id).hex() for span in parsed} == {trace_id}
    by_index = {_attributes(span).get(c.STEP_INDEX): span for span in parsed}
    long_step = _attributes(by_index[2])[c.GEN_AI_OUTPUT_MESSAGES]
    assert json.loads(long_step)[0]["parts"][0]["content"] == LONG_CONTENT


class _GrpcReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []

    def Export(self, request: ExportTraceServiceRequest, context: Any) -> Any:
        self.requests.append(request)
        return ExportTraceServiceResponse()


@contextmanager
def _grpc_receiver() -> Iterator[tuple[str, _GrpcReceiver]]:
    receiver = _GrpcReceiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", receiver
    finally:
        server.stop(None)


def test_grpc_replay_delivers_every_span() -> None:
    with _grpc_receiver() as (url, receiver):
        result = replay([_record()], to=url, protocol="grpc", progress=False)

    assert result == ReplayResult(records=1, spans=6, failures=0)
    spans = [
        span
        for request in receiver.requests
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]
    assert sorted(_attributes(s).get(c.STEP_INDEX, -1) for s in spans) == [-1, 0, 1, 2, 3, 4]


def test_rejected_exports_are_counted_as_failures() -> None:
    with running_sink(OtlpSink(reject_all=True)) as sink:
        result = replay([_record(), _record("algorithm-generated/2")], to=sink.url, progress=False)

    assert result.records == 2
    assert result.spans == 0
    assert result.failures == 2 and result.failed_spans == 12


def test_cli_replays_dataset_records_with_their_indices_and_contents() -> None:
    root = resolve_datasets_dir()
    expected = list(itertools.islice(load_dataset("who_and_when:hand-crafted", root=root), 2))
    with running_sink() as sink:
        result = CliRunner().invoke(
            bench,
            ["replay", "--dataset", "who_and_when:hand-crafted", "--limit", "2",
             "--to", sink.url, "--datasets-dir", str(root), "--no-progress"],
        )  # fmt: skip

    assert result.exit_code == 0, result.output
    total = sum(len(record.trajectory.steps) + 1 for record in expected)
    assert f"replayed 2 records: {total} spans sent, 0 export failures" in result.output
    traces: dict[bytes, list[Any]] = {}
    for _, span in _sink_spans(sink):
        traces.setdefault(span.trace_id, []).append(span)
    replayed = {}
    for spans in traces.values():
        (root_span,) = [span for span in spans if not span.parent_span_id]
        steps = {
            _attributes(span)[c.STEP_INDEX]: json.loads(
                _attributes(span)[c.GEN_AI_OUTPUT_MESSAGES]
            )[0]["parts"][0]["content"]
            for span in spans
            if span.parent_span_id
        }
        replayed[_attributes(root_span)[c.DATASET_RECORD]] = steps
    assert replayed == {
        record.record_id: {step.index: step.content for step in record.trajectory.steps}
        for record in expected
    }


def test_cli_exits_non_zero_when_exports_fail() -> None:
    root = resolve_datasets_dir()
    with running_sink(OtlpSink(reject_all=True)) as sink:
        result = CliRunner().invoke(
            bench,
            ["replay", "--dataset", "who_and_when:algorithm-generated", "--limit", "1",
             "--to", sink.url, "--datasets-dir", str(root), "--no-progress"],
        )  # fmt: skip

    assert result.exit_code == 1
    assert "1 export failures" in result.output


def test_cli_rejects_malformed_headers_and_unknown_datasets() -> None:
    bad_headers = CliRunner().invoke(
        bench,
        ["replay", "--dataset", "who_and_when", "--to", "http://127.0.0.1:9", "--headers", "oops"],
    )
    assert bad_headers.exit_code == 2 and "key=value" in bad_headers.output

    unknown = CliRunner().invoke(
        bench, ["replay", "--dataset", "nope", "--to", "http://127.0.0.1:9"]
    )
    assert unknown.exit_code == 1 and "unknown dataset spec 'nope'" in unknown.output
