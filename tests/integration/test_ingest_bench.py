"""`faultfinder bench ingest` against a real OTLP/HTTP sink on loopback."""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from faultfinder import conventions as c
from faultfinder.cli.bench import bench
from faultfinder.drills.ingest import ingest, report_lines
from faultfinder.drills.otlp_traces import prepare_requests
from faultfinder.server.otlp.otlp_json import parse_request_json
from tests.integration.sidecar import running_sidecar


def decode_otlp_body(
    body: bytes, content_type: str, content_encoding: str
) -> ExportTraceServiceRequest:
    """ExportTraceServiceRequest of an OTLP/HTTP body, as a receiver would decode it."""
    if content_encoding == "gzip":
        body = gzip.decompress(body)
    if content_type.startswith("application/json"):
        return parse_request_json(body)
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    return request


@dataclass
class OtlpSink:
    """A real OTLP/HTTP traces receiver on loopback that decodes every request and counts spans.

    `throttle_first` requests are answered 503 + Retry-After; `reject_all` answers 400;
    `unstored_requests` are acknowledged but never counted as stored; `stats` serves
    faultfinder's `/api/stats/ingest` (else 404) starting from `stored_before`.
    """

    throttle_first: int = 0
    reject_all: bool = False
    unstored_requests: int = 0
    stats: bool = True
    stored_before: int = 0
    posts: int = 0
    span_ids: set[bytes] = field(default_factory=set)
    trace_ids: set[bytes] = field(default_factory=set)
    stored: int = 0
    spans_received: int = 0
    content_types: set[str] = field(default_factory=set)
    content_encodings: set[str] = field(default_factory=set)
    bodies: list[bytes] = field(default_factory=list)
    requests: list[Any] = field(default_factory=list)
    seen_headers: list[dict[str, str]] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    """`time.monotonic()` when each POST arrived."""
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: bytes, content_type: str, **extra: str) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                for name, value in extra.items():
                    self.send_header(name.replace("_", "-"), value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path != "/api/stats/ingest" or not sink.stats:
                    self._answer(404, b'{"detail": "not found"}', "application/json")
                    return
                with sink._lock:
                    figures = {"spans_stored": sink.stored_before + sink.stored}
                self._answer(200, json.dumps(figures).encode(), "application/json")

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                if self.path != "/v1/traces":
                    self._answer(404, b"", "text/plain")
                    return
                with sink._lock:
                    sink.arrivals.append(time.monotonic())
                    sink.posts += 1
                    throttled = sink.posts <= sink.throttle_first
                if throttled:
                    self._answer(503, b"busy", "text/plain", retry_after="0")
                    return
                if sink.reject_all:
                    self._answer(400, b"bad data", "text/plain")
                    return
                content_type = self.headers.get("content-type", "")
                encoding = self.headers.get("content-encoding", "")
                request = decode_otlp_body(body, content_type, encoding)
                spans = [
                    span
                    for resource_spans in request.resource_spans
                    for scope_spans in resource_spans.scope_spans
                    for span in scope_spans.spans
                ]
                with sink._lock:
                    sink.content_types.add(content_type)
                    sink.content_encodings.add(encoding)
                    sink.bodies.append(body)
                    sink.seen_headers.append({k.lower(): v for k, v in self.headers.items()})
                    sink.requests.append(request)
                    sink.spans_received += len(spans)
                    sink.span_ids.update(span.span_id for span in spans)
                    sink.trace_ids.update(span.trace_id for span in spans)
                    if sink.unstored_requests > 0:
                        sink.unstored_requests -= 1
                    else:
                        sink.stored += len(spans)
                self._answer(
                    200,
                    ExportTraceServiceResponse().SerializeToString(),
                    "application/x-protobuf",
                )

        return Handler


@contextmanager
def running_sink(sink: OtlpSink | None = None) -> Iterator[OtlpSink]:
    """`sink` served on a free loopback port for the duration of the block."""
    sink = sink or OtlpSink()
    server = ThreadingHTTPServer(("127.0.0.1", 0), sink.handler())
    server.daemon_threads = True
    sink.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield sink
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_sends_exactly_the_requested_spans_and_verifies_storage() -> None:
    with running_sink(OtlpSink(stored_before=7)) as sink:
        report = ingest(
            sink.url, 250, batch=100, concurrency=3, verify="faultfinder", progress=False
        )

    assert sink.spans_received == 250
    assert len(sink.span_ids) == 250
    assert report.spans_accepted == 250 and report.spans_rejected == 0
    assert report.requests == 3 and report.status_2xx == 3
    assert report.status_4xx == report.status_5xx == report.throttled == report.retries == 0
    assert 0 < report.latency_p50_ms <= report.latency_p99_ms
    assert report.accepted_spans_per_s > 0
    # The sink already held 7 spans: only this run's growth counts.
    assert report.spans_stored == 250 and report.lost_spans == 0
    assert report.durable_spans_per_s is not None and report.durable_spans_per_s > 0
    assert report.durable_after_s is not None and report.durable_after_s >= report.send_seconds
    assert report.client_peak_rss_mb > 0
    # This sink has no /metrics: no server-side breakdown, and no error for it.
    assert report.server_stages is None and report.writer_busy is None
    assert report.errors == []
    assert report.ok


def test_against_faultfinder_it_reports_where_the_servers_time_went(
    database_url: str, tmp_path: Path
) -> None:
    with running_sidecar(database_url, tmp_path) as sidecar:
        ingest(sidecar.url, 300, batch=100, verify="faultfinder", progress=False)
        report = ingest(
            sidecar.url, 500, batch=50, concurrency=4, verify="faultfinder", progress=False
        )
    assert report.ok and report.requests == 10
    stages = report.server_stages
    assert stages is not None and set(stages) == {"decode", "queue_wait", "commit"}
    # Only this run's requests count (the first run's 3 are left out).
    assert stages["decode"].count == stages["queue_wait"].count == 10
    # Waiting requests share transactions: at least one, at most one per request.
    assert 1 <= stages["commit"].count <= 10
    for times in stages.values():
        assert times.mean_ms > 0
        assert times.p50_at_most_ms is not None and times.p99_at_most_ms is not None
        assert times.p50_at_most_ms <= times.p99_at_most_ms
    assert report.writer_busy is not None and 0 < report.writer_busy <= 1.0
    lines = "\n".join(report_lines(report))
    assert "server commits    " in lines and "writer busy" in lines


def test_a_fixed_rate_spreads_the_requests_over_time_instead_of_sending_at_once() -> None:
    # 10 requests of 50 spans offered at 1,000 spans/s: one every 50 ms, the last due
    # 450 ms after the first. Sent as fast as answered, a loopback sink takes them all
    # in a few milliseconds.
    with running_sink() as sink:
        report = ingest(
            sink.url,
            500,
            batch=50,
            concurrency=8,
            rate=1000,
            verify="faultfinder",
            progress=False,
        )
    assert report.ok and report.spans_accepted == 500
    assert report.offered_spans_per_s == 1000
    # Never earlier than due (a late scheduler can only stretch it).
    assert sink.arrivals[-1] - sink.arrivals[0] >= 0.40
    assert "offered 1000 spans/s" in "\n".join(report_lines(report))


def test_json_gzip_bodies_decode_as_otlp_json() -> None:
    with running_sink() as sink:
        report = ingest(
            sink.url, 120, batch=50, body_format="json", gzip=True, verify="none", progress=False
        )

    assert sink.content_types == {"application/json"}
    assert sink.content_encodings == {"gzip"}
    assert len(sink.span_ids) == 120 and report.spans_accepted == 120
    # A compressed body is smaller than the figure reported per span before compression.
    assert report.bytes_sent < report.mean_span_bytes * 120


def test_throttled_requests_are_retried_after_retry_after_and_nothing_is_lost() -> None:
    with running_sink(OtlpSink(throttle_first=3)) as sink:
        report = ingest(
            sink.url, 300, batch=100, concurrency=2, verify="faultfinder", progress=False
        )

    assert report.throttled == 3 and report.retries == 3
    assert report.status_2xx == 3 and report.status_5xx == 0
    assert len(sink.span_ids) == 300 and sink.spans_received == 300
    assert report.spans_accepted == 300 and report.lost_spans == 0
    assert report.ok


def test_server_without_stats_endpoint_reports_durability_not_measurable() -> None:
    with running_sink(OtlpSink(stats=False)) as sink:
        report = ingest(sink.url, 100, verify="faultfinder", progress=False)

    assert report.spans_accepted == 100
    assert report.durability_note is not None and "not measurable" in report.durability_note
    assert report.lost_spans is None and report.durable_spans_per_s is None


def test_acknowledged_but_unstored_spans_are_reported_lost() -> None:
    with running_sink(OtlpSink(unstored_requests=1)) as sink:
        report = ingest(
            sink.url, 200, batch=50, verify="faultfinder", settle_timeout=0.3, progress=False
        )

    assert report.spans_accepted == 200
    assert report.lost_spans == 50 and report.spans_stored == 150
    assert report.durable_spans_per_s is None
    assert not report.ok


def test_cli_prints_json_figures_and_the_server_peak_rss() -> None:
    with running_sink() as sink:
        # The sink runs in this process, so this process is the server to watch.
        result = CliRunner().invoke(
            bench,
            [
                "ingest", "--to", sink.url, "--spans", "150", "--batch", "60",
                "--verify", "none", "--json", "--no-progress", "--server-pid", str(os.getpid()),
            ],
        )  # fmt: skip

    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["spans_accepted"] == 150 and figures["requests"] == 3
    assert figures["server_peak_rss_mb"] > 0
    assert figures["server_sampled_peak_rss_mb"] > 0
    assert len(sink.span_ids) == 150


def test_cli_fails_when_the_server_rejects_the_spans() -> None:
    with running_sink(OtlpSink(reject_all=True)) as sink:
        result = CliRunner().invoke(
            bench,
            ["ingest", "--to", sink.url, "--spans", "100", "--batch", "40", "--no-progress",
             "--verify", "none"],
        )  # fmt: skip

    assert result.exit_code == 1
    assert "4xx 3" in result.output
    assert "HTTP 400" in result.output


def test_prebuilt_spans_are_realistic_agent_runs_of_about_2_5_kb() -> None:
    requests = prepare_requests(1000, batch=100)
    raw_bytes = sum(r.raw_size for r in requests)
    assert sum(r.spans for r in requests) == 1000
    assert 2000 <= raw_bytes / 1000 <= 3000

    operations: dict[str, int] = {}
    agents: set[str] = set()
    roots = 0
    for prepared in requests:
        request = ExportTraceServiceRequest.FromString(prepared.body)
        for span in request.resource_spans[0].scope_spans[0].spans:
            attributes = {kv.key: kv.value for kv in span.attributes}
            op = attributes[c.GEN_AI_OPERATION_NAME].string_value
            operations[op] = operations.get(op, 0) + 1
            roots += not span.parent_span_id
            if op == c.OP_INVOKE_AGENT:
                agents.add(attributes[c.GEN_AI_AGENT_NAME].string_value)
            if op == c.OP_CHAT:
                messages = json.loads(attributes[c.GEN_AI_OUTPUT_MESSAGES].string_value)
                assert messages[0]["role"] == "assistant"
                assert messages[0]["parts"][0]["content"]
            if op == c.OP_EXECUTE_TOOL:
                assert attributes[c.GEN_AI_TOOL_NAME].string_value
    assert set(operations) == {
        c.OP_INVOKE_WORKFLOW,
        c.OP_INVOKE_AGENT,
        c.OP_CHAT,
        c.OP_EXECUTE_TOOL,
    }
    assert roots == operations[c.OP_INVOKE_WORKFLOW] > 10
    assert len(agents) >= 3


def test_each_preparation_draws_fresh_ids_so_reruns_are_not_deduplicated() -> None:
    def ids() -> set[bytes]:
        request = ExportTraceServiceRequest.FromString(prepare_requests(50)[0].body)
        return {span.span_id for span in request.resource_spans[0].scope_spans[0].spans}

    assert not ids() & ids()
