"""The hostile drills' bodies are what they claim to be (the issue's sizes, parseable
OTLP), and their findings read as a verdict."""

from __future__ import annotations

import gzip
import json

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from faultfinder.drills.chaos.hostile import finding_lines, parse_items
from faultfinder.drills.chaos.hostile_bodies import (
    RunOfSteps,
    attribute_request,
    gzip_bomb,
    minimal_spans_body,
    minimal_spans_fitting,
)
from faultfinder.drills.chaos.hostile_context import Finding

MIB = 1024 * 1024


def _spans(body: bytes) -> list[Span]:
    request = ExportTraceServiceRequest.FromString(body)
    return [span for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]


def test_minimal_spans_are_valid_otlp_with_distinct_ids_in_one_trace() -> None:
    spans = _spans(minimal_spans_body(1000, trace_id=b"\x01" * 16))
    assert len(spans) == 1000
    assert {span.trace_id for span in spans} == {b"\x01" * 16}
    assert len({span.span_id for span in spans}) == 1000


def test_the_issues_body_is_559204_spans_within_16_mib() -> None:
    assert minimal_spans_fitting(16 * MIB) >= 559_204
    assert len(minimal_spans_body(559_204)) <= 16 * MIB


def test_a_gzip_bomb_inflates_to_at_most_its_size_and_compresses_tenfold() -> None:
    bomb = gzip_bomb(4 * MIB)
    inflated = gzip.decompress(bomb)
    assert 4 * MIB - 30 < len(inflated) <= 4 * MIB
    assert len(bomb) * 10 < len(inflated)
    assert len(_spans(inflated)) == minimal_spans_fitting(4 * MIB)


def test_a_run_of_steps_keeps_one_run_over_requests() -> None:
    run = RunOfSteps("flood")
    first, second = _spans(run.request(9)), _spans(run.request(10))
    assert len(first) == 10 and len(second) == 10  # the root rides in the first request
    spans = first + second
    assert len({span.span_id for span in spans}) == 20
    roots = [span for span in spans if not span.parent_span_id]
    assert len(roots) == 1
    run_ids = {
        attribute.value.string_value
        for span in spans
        for attribute in span.attributes
        if attribute.key == "faultfinder.run.id"
    }
    assert run_ids == {"flood"}


def test_an_attribute_request_has_the_steps_asked_for() -> None:
    payload = json.loads(attribute_request(300, attributor="first_error"))
    assert len(payload["trajectory"]["steps"]) == 300
    assert payload["attributor"] == "first_error"


def test_items_are_all_or_a_list_of_issue_items() -> None:
    assert parse_items("all") == list(range(1, 13))
    assert parse_items("6, 1,3,1,12") == [1, 3, 6, 12]
    with pytest.raises(ValueError, match="13"):
        parse_items("1,13")


def test_a_finding_says_whether_it_held_and_which_check_failed() -> None:
    finding = Finding(6, "large runs", "SQLite")
    finding.add("GET /api/runs", status=200, seconds=0.25)
    finding.check("GET /api/runs: 200", True)
    finding.check("GET /api/runs: ingest stall under 1 s", False)
    lines = list(finding_lines(finding))
    assert finding.holds is False
    assert "DOES NOT HOLD" in lines[0]
    assert any(line.startswith("  FAIL GET /api/runs: ingest stall") for line in lines)
    skipped = Finding(7, "full disk", "PostgreSQL", skipped="SQLite only")
    assert skipped.holds is None and "not run" in next(finding_lines(skipped))
