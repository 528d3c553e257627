"""The chaos drills' load is what its requests claim: valid OTLP bodies carrying exactly the
spans listed, fresh ids every time, each run's tree intact, failed runs when asked for."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from faultfinder.drills.chaos.traffic import ChaosRequest, ChaosTraffic, span_keys

HEX_KEY = re.compile(r"[0-9a-f]{32}/[0-9a-f]{16}")


def _spans(request: ChaosRequest) -> list[Span]:
    parsed = ExportTraceServiceRequest.FromString(request.body)
    return [span for rs in parsed.resource_spans for ss in rs.scope_spans for span in ss.spans]


def _runs(request: ChaosRequest) -> dict[bytes, list[Span]]:
    """The request's spans by trace."""
    runs: dict[bytes, list[Span]] = {}
    for span in _spans(request):
        runs.setdefault(span.trace_id, []).append(span)
    return runs


@pytest.mark.parametrize("realistic", [False, True], ids=["small", "realistic"])
def test_a_body_carries_exactly_the_spans_its_request_lists(realistic: bool) -> None:
    traffic = ChaosTraffic(runs_per_request=3, failed_interval_s=None, realistic=realistic)
    for _ in range(12):  # past the realistic mode's templates, which it takes in turn
        request = traffic.next_request()
        spans = _spans(request)
        assert [(span.trace_id.hex(), span.span_id.hex()) for span in spans] == list(request.spans)
        assert all(HEX_KEY.fullmatch(f"{trace}/{span}") for trace, span in request.spans)
        assert len(_runs(request)) == request.runs == 3
        assert request.failed_runs == 0


@pytest.mark.parametrize("realistic", [False, True], ids=["small", "realistic"])
def test_ids_are_never_reused_across_requests(realistic: bool) -> None:
    traffic = ChaosTraffic(runs_per_request=4, failed_interval_s=0.01, realistic=realistic)
    keys: list[tuple[str, str]] = []
    traces: list[str] = []
    for _ in range(300):
        request = traffic.next_request()
        keys.extend(request.spans)
        traces.extend(dict.fromkeys(trace for trace, _ in request.spans))
    assert len(set(keys)) == len(keys)
    assert len({span for _, span in keys}) == len(keys)
    assert len(set(traces)) == len(traces) == 1200
    assert "0" * 32 not in traces and "0" * 16 not in {span for _, span in keys}


@pytest.mark.parametrize("realistic", [False, True], ids=["small", "realistic"])
def test_every_parent_is_a_span_of_the_same_run_in_the_same_body(realistic: bool) -> None:
    traffic = ChaosTraffic(runs_per_request=4, failed_interval_s=0.0, realistic=realistic)
    for _ in range(20):
        for run in _runs(traffic.next_request()).values():
            ids = {span.span_id for span in run}
            roots = [span for span in run if not span.parent_span_id]
            assert len(roots) == 1
            assert all(span.parent_span_id in ids for span in run if span is not roots[0])
            # Every span reaches the root: the tree was rewritten whole.
            parents = {span.span_id: span.parent_span_id for span in run}
            for span in run:
                at, steps = span.span_id, 0
                while parents[at]:
                    at, steps = parents[at], steps + 1
                    assert steps <= len(run)
                assert at == roots[0].span_id


def test_only_the_ids_differ_between_requests_of_one_template() -> None:
    traffic = ChaosTraffic(failed_interval_s=None)
    first, second = traffic.next_request(), traffic.next_request()
    assert first.body != second.body
    assert len(first.body) == len(second.body)

    def without_ids(request: ChaosRequest) -> ExportTraceServiceRequest:
        parsed: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(request.body)
        for rs in parsed.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    span.trace_id, span.span_id, span.parent_span_id = b"", b"", b""
        return parsed

    assert without_ids(first) == without_ids(second)


def _failed(run: list[Span]) -> bool:
    return any(span.status.code == Status.STATUS_CODE_ERROR for span in run)


def test_failed_runs_appear_as_often_as_the_interval_allows() -> None:
    always = ChaosTraffic(runs_per_request=2, failed_interval_s=0.0)
    for _ in range(5):
        request = always.next_request()
        runs = _runs(request).values()
        assert request.failed_runs == 2
        assert all(_failed(run) for run in runs)
        # The root and the failing tool step end in ERROR; the other steps do not.
        for run in runs:
            errors = [span.name for span in run if span.status.code == Status.STATUS_CODE_ERROR]
            assert len(errors) == 2
            assert any("parse_hotels" in str(span.attributes) for span in run)

    once = ChaosTraffic(runs_per_request=2, failed_interval_s=3600)
    requests = [once.next_request() for _ in range(5)]
    assert [request.failed_runs for request in requests] == [1, 0, 0, 0, 0]
    assert sum(_failed(run) for request in requests for run in _runs(request).values()) == 1

    never = ChaosTraffic(runs_per_request=2, failed_interval_s=None)
    assert not any(_failed(run) for run in _runs(never.next_request()).values())


def test_realistic_runs_are_large_varied_agent_runs() -> None:
    traffic = ChaosTraffic(runs_per_request=1, failed_interval_s=None, realistic=True)
    requests = [traffic.next_request() for _ in range(16)]
    sizes = Counter(len(request.spans) for request in requests)
    assert min(sizes) >= 5
    assert len(sizes) > 1  # the runs differ in shape, not only in ids
    assert sum(len(request.body) for request in requests) / len(requests) > 10_000
    names = {span.name for request in requests for span in _spans(request)}
    assert any(name.startswith("chat ") for name in names)
    assert any(name.startswith("execute_tool ") for name in names)


def test_a_realistic_failed_run_is_a_small_failed_run() -> None:
    traffic = ChaosTraffic(runs_per_request=2, failed_interval_s=3600, realistic=True)
    request = traffic.next_request()
    assert request.failed_runs == 1
    assert sorted(_failed(run) for run in _runs(request).values()) == [False, True]


def test_exporter_batches_are_sdk_spans_of_new_runs() -> None:
    traffic = ChaosTraffic(runs_per_request=3, failed_interval_s=None)
    batch, other = traffic.exporter_batch(), traffic.exporter_batch()
    assert len({span.context.trace_id for span in batch if span.context}) == 3
    assert not span_keys(batch) & span_keys(other)
    assert not span_keys(batch) & set(traffic.next_request().spans)
