"""A finished run keeps its agents and step count on its row; a late span clears them.

Listings read them from the row instead of assembling every run from its spans."""

from __future__ import annotations

import time

from faultfinder import conventions as c
from faultfinder.reading.model import SpanRecord
from faultfinder.server.lifecycle import sweep
from faultfinder.server.runs import RunService
from faultfinder.server.store import JobQueue, LabelStore, SpanStore

SECOND = 1_000_000_000
TRACE = "7".rjust(32, "0")


def step(span_id: int, agent: str, text: str, *, start: int) -> SpanRecord:
    begin = time.time_ns() - 3600 * SECOND + start * SECOND
    return SpanRecord(
        trace_id=TRACE,
        span_id=f"{span_id:016x}",
        parent_span_id=None if span_id == 1 else f"{1:016x}",
        name=f"{agent} speaks",
        start_time_unix_nano=begin,
        end_time_unix_nano=begin + SECOND // 2 if span_id != 1 else begin + 100 * SECOND,
        attributes={
            c.GEN_AI_AGENT_NAME: agent,
            c.STEP_KIND: c.STEP_KIND_MESSAGE,
            c.STEP_CONTENT: text,
        },
    )


async def test_a_finished_run_keeps_its_shape_until_a_span_arrives_late(
    store: SpanStore,
) -> None:
    service = RunService(
        store,
        JobQueue(store.engine, record_attribution=store.record_attribution),
        LabelStore(store.engine),
    )
    root = step(1, "Planner", "plan the trip", start=0)
    await store.write_spans(
        [
            root,
            step(2, "Searcher", "found 3 flights", start=1),
            step(3, "Planner", "TP 433", start=2),
        ]
    )
    await sweep(store, now=time.time() + 60, quiet_period_s=1)
    row = await store.get_run(TRACE)
    assert row is not None and row.status != "running"
    assert (row.agents, row.n_steps) == (None, None)

    # The root wraps the two turns (a container, not a step).
    # The first listing assembles the run once and keeps what it found on the row.
    page = await service.list_runs()
    assert [(run.agents, run.n_steps) for run in page.items] == [(["Searcher", "Planner"], 2)]
    kept = await store.get_run(TRACE)
    assert kept is not None
    assert (kept.agents, kept.n_steps) == (["Searcher", "Planner"], 2)
    assert kept.version == row.version  # a derived value: the run did not change

    # A span arriving after the run finished makes the kept shape stale: it is cleared,
    # and the next listing shows the run as it is now.
    await store.write_spans([step(4, "Critic", "the fare is wrong", start=3)])
    late = await store.get_run(TRACE)
    assert late is not None and (late.agents, late.n_steps) == (None, None)
    page = await service.list_runs()
    assert [(run.agents, run.n_steps) for run in page.items] == [
        (["Searcher", "Planner", "Critic"], 3)
    ]


async def test_a_shape_read_before_a_late_span_is_not_kept(store: SpanStore) -> None:
    await store.write_spans(
        [step(1, "Planner", "plan", start=0), step(2, "Searcher", "go", start=1)]
    )
    await sweep(store, now=time.time() + 60, quiet_period_s=1)
    stale = await store.get_run(TRACE)
    assert stale is not None
    await store.write_spans([step(3, "Critic", "late", start=2)])

    kept = await store.keep_shape(TRACE, agents=["Planner"], n_steps=1, version=stale.version)

    assert kept is False
    row = await store.get_run(TRACE)
    assert row is not None and (row.agents, row.n_steps) == (None, None)
