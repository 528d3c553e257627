"""`RunSpanBudget`: ingest's per-run span counts keep each run within its limit."""

from __future__ import annotations

from faultfinder.reading.model import SpanRecord
from faultfinder.server.run_budget import RunSpanBudget
from tests.otlp_helpers import MS, T0, SpanRecorder, span_records


def _spans(*runs: str) -> list[SpanRecord]:
    recorder = SpanRecorder()
    for index, run_id in enumerate(runs):
        recorder.span(
            "s",
            start=T0 + index * MS,
            end=T0 + index * MS + 1,
            attributes={"faultfinder.run.id": run_id},
        )
    return span_records(recorder.spans)


def test_a_full_run_refuses_its_excess_in_order_and_other_runs_are_untouched() -> None:
    budget = RunSpanBudget(3)
    first = budget.admit(_spans("a", "b", "a"))
    assert first.refused == 0 and len(first.spans) == 3
    second = budget.admit(_spans("a", "a", "b", "a"))
    assert [s.run_id for s in second.spans] == ["a", "b"]
    assert second.refused == 2
    assert second.messages == ("run 'a' holds the most spans a run may have (3); 2 more refused",)
    assert budget.count("a") == 3 and budget.count("b") == 2


def test_refunded_spans_free_their_room_and_old_runs_are_forgotten() -> None:
    budget = RunSpanBudget(2, tracked=2)
    admitted = budget.admit(_spans("a", "a"))
    budget.refund(admitted.spans)  # e.g. the queue was full: nothing was queued
    assert budget.admit(_spans("a", "a")).refused == 0
    budget.admit(_spans("b"))
    budget.admit(_spans("c"))  # three runs seen, two tracked: "a" (least recent) goes
    assert budget.count("a") == 0 and budget.count("c") == 1
