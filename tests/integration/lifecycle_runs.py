"""Runs for the lifecycle tests: spans with explicit times, a finished root with a child,
and sweeps at a given `now` with the tests' quiet period.
"""

from __future__ import annotations

import itertools
from typing import Any

from faultfinder.reading.model import SpanRecord, StatusCode
from faultfinder.server import lifecycle
from faultfinder.server.store import SpanStore

QUIET = 30.0
SECOND = 1_000_000_000
_ids = itertools.count(1)


def span(
    trace: str,
    *,
    parent: str | None = None,
    status: StatusCode = StatusCode.UNSET,
    ended: bool = True,
    attrs: dict[str, Any] | None = None,
    parent_remote: bool | None = None,
) -> SpanRecord:
    start = next(_ids) * SECOND
    return SpanRecord(
        trace_id=trace.rjust(32, "0"),
        span_id=f"{next(_ids):016x}",
        parent_span_id=parent,
        parent_remote=parent_remote,
        name=f"span in {trace}",
        start_time_unix_nano=start,
        end_time_unix_nano=start + SECOND if ended else 0,
        status_code=status,
        attributes=attrs or {},
    )


def run_id(trace: str) -> str:
    return trace.rjust(32, "0")


async def sweep(store: SpanStore, now: float) -> dict[str, tuple[str, str]]:
    transitions = await lifecycle.sweep(store, now=now, quiet_period_s=QUIET)
    return {t.run_id: (t.previous.value, t.status.value) for t in transitions}


async def status(store: SpanStore, trace: str) -> str:
    run = await store.get_run(run_id(trace))
    assert run is not None
    current: str = run.status
    return current


async def write_run(store: SpanStore, trace: str, at: float, **root_options: Any) -> SpanRecord:
    """A finished root span with one child, received at `at`."""
    root = span(trace, **root_options)
    await store.write_spans([span(trace, parent=root.span_id), root], received_at=at)
    return root
