"""Spans for the span store's tests: short trace labels padded to trace ids, times in
seconds after a fixed start."""

from __future__ import annotations

import itertools
from typing import Any

from faultfinder.reading.model import SpanRecord, StatusCode
from faultfinder.reading.runs import with_run_id

_ids = itertools.count(1)
SECOND = 1_000_000_000
T0 = 1_700_000_000 * SECOND


def span(
    trace: str,
    *,
    parent: str | None = None,
    span_id: str | None = None,
    start: int = 0,
    duration: int = SECOND,
    status: StatusCode = StatusCode.UNSET,
    project: str = "default",
    attrs: dict[str, Any] | None = None,
    by_conversation: bool = False,
) -> SpanRecord:
    """A span of trace `trace` (a short label, padded to a trace id) starting `start` s after
    T0, stamped with its run as the decoder would (grouping runs `by_conversation` or not)."""
    record = SpanRecord(
        trace_id=trace.rjust(32, "0"),
        span_id=span_id or f"{next(_ids):016x}",
        parent_span_id=parent,
        name=f"span in {trace}",
        start_time_unix_nano=T0 + start * SECOND,
        end_time_unix_nano=T0 + start * SECOND + duration,
        status_code=status,
        attributes=attrs or {},
        project=project,
    )
    return with_run_id(record, group_by_conversation=by_conversation)


def trace_id(label: str) -> str:
    return label.rjust(32, "0")
