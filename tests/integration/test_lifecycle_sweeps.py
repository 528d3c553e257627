"""The lifecycle sweep in the database: it applies the same rules as `decide`, leaves
attributed runs alone, moves each run once under concurrent sweepers and settles a
backlog larger than a page in one sweep.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from sqlmodel import SQLModel

from faultfinder import conventions as c
from faultfinder.reading.model import SpanRecord, StatusCode
from faultfinder.server import lifecycle
from faultfinder.server.db.engine import create_engine
from faultfinder.server.store import RunStatus, SpanStore
from tests.integration.lifecycle_runs import QUIET, run_id, span, status, sweep, write_run


async def test_attributed_runs_are_left_alone(store: SpanStore) -> None:
    t0 = 1_000.0
    await write_run(store, "i", t0, status=StatusCode.ERROR)
    assert await sweep(store, t0 + QUIET + 1) == {run_id("i"): ("running", "failed")}
    assert await store.set_status(run_id("i"), RunStatus.ATTRIBUTED, expected=RunStatus.FAILED)
    # Only from the expected status.
    assert not await store.set_status(run_id("i"), RunStatus.ATTRIBUTED, expected=RunStatus.FAILED)

    await store.set_outcome(run_id("i"), "failure")
    assert await sweep(store, t0 + 2 * QUIET) == {}
    assert await status(store, "i") == "attributed"


async def test_database_applies_the_same_rules_as_decide(store: SpanStore) -> None:
    """Every combination of the facts the rules look at: the runs the sweep moves (in
    the database) are exactly those `lifecycle.decide` moves, to the same status; then
    again for complete runs that a late span or a posted outcome changed."""
    t_new = time.time()
    received = {
        "new": t_new,
        "quiet": t_new - QUIET - 5,  # before the quiet period
        "gone": t_new - lifecycle.DEFAULT_UNFINISHED_AFTER_S - 5,  # before unfinished_after
    }
    now = t_new + 1
    cases = list(
        itertools.product(
            tuple(received),  # when the last span was received
            # the root span; "local": orphans whose parent is in their process, and
            # "recovered": the same with an error followed by a later span that ended well
            ("ended", "open", "orphans", "local", "recovered"),
            (StatusCode.UNSET, StatusCode.ERROR),  # the root's status
            (None, "success", "failure"),  # outcome attribute on a span
            (None, "success", "failure"),  # posted outcome
        )
    )
    traces = {}
    for n, (age, root_kind, root_status, attr_outcome, posted) in enumerate(cases):
        trace = f"r{n:03d}"
        traces[trace] = posted
        attrs = {c.RUN_OUTCOME: attr_outcome} if attr_outcome else {}
        orphan = "00000000000000aa"
        if root_kind in ("orphans", "local"):
            remote = None if root_kind == "orphans" else False
            spans = [
                span(trace, parent=orphan, attrs=attrs, status=root_status, parent_remote=remote)
            ]
        elif root_kind == "recovered":
            spans = [
                span(trace, parent=orphan, status=StatusCode.ERROR, parent_remote=False),
                span(trace, parent=orphan, attrs=attrs, parent_remote=False),
            ]
        else:
            root = span(trace, status=root_status, ended=root_kind == "ended")
            spans = [span(trace, parent=root.span_id, attrs=attrs), root]
        await store.write_spans(spans, received_at=received[age])
        if posted is not None:
            await store.set_outcome(run_id(trace), posted)

    async def expected(at: float) -> dict[str, tuple[str, str]]:
        out = {}
        for trace in traces:
            run = await store.get_run(run_id(trace))
            assert run is not None
            failed_work = lifecycle.work_failed(await store.run_spans(run.id))
            decision = lifecycle.decide(
                run,
                now_ns=int(at * 1e9),
                quiet_period_ns=int(QUIET * 1e9),
                work_failed=failed_work,
            )
            if decision is not None:
                out[run.id] = (str(run.status), decision.value)
        return out

    first = await expected(now)
    assert len(first) > len(traces) / 3  # the grid covers both outcomes of the rules
    assert {to for _, to in first.values()} == {"complete", "failed"}
    before = {trace: await store.get_run(run_id(trace)) for trace in traces}
    assert await sweep(store, now) == first
    # Marked unfinished: exactly the runs failed for want of a root, nobody's verdict.
    gone_since = int((now - lifecycle.DEFAULT_UNFINISHED_AFTER_S) * 1e9)
    marked = 0
    for run in before.values():
        assert run is not None
        after = await store.get_run(run.id)
        assert after is not None
        gave_up = (
            run.id in first
            and lifecycle.awaits_root(run)
            and run.outcome is None
            and run.last_span_received_at <= gone_since
        )
        assert after.unfinished == gave_up, run
        marked += after.unfinished
    assert marked > 0

    # Late news for finished runs: a failure verdict on a span, a posted failure, a
    # plain late span. Complete runs that now fail move; nothing else does.
    finished = [t for t in traces if run_id(t) in first]
    for i, trace in enumerate(finished):
        if i % 3 == 0:
            late = span(trace, parent="00000000000000bb", attrs={c.RUN_OUTCOME: "failure"})
            await store.write_spans([late], received_at=now)
        elif i % 3 == 1 and traces[trace] is None:
            await store.set_outcome(run_id(trace), "failure")
        else:
            await store.write_spans([span(trace, parent="00000000000000bb")], received_at=now)
    second = await expected(now + 1)
    assert second and {move for move in second.values()} == {("complete", "failed")}
    assert await sweep(store, now + 1) == second
    assert await sweep(store, now + 2) == {}


async def test_concurrent_sweepers_move_each_run_once(migrated_database_url: str) -> None:
    """Two replicas sweeping the same backlog at once: every due run is moved, and by
    exactly one of them (the second finds it settled or skips it while locked)."""
    engines = [create_engine(migrated_database_url) for _ in range(2)]
    try:
        async with engines[0].begin() as conn:
            for table in reversed(SQLModel.metadata.sorted_tables):
                await conn.execute(table.delete())
        stores = [SpanStore(engine) for engine in engines]
        t0 = 1_000.0
        traces = [f"k{i:04d}" for i in range(600)]
        for start in range(0, len(traces), 100):
            batch: list[SpanRecord] = []
            for trace in traces[start : start + 100]:
                root = span(trace)
                batch += [span(trace, parent=root.span_id), root]
            await stores[0].write_spans(batch, received_at=t0)
        results = await asyncio.gather(
            *(
                lifecycle.sweep(s, now=t0 + QUIET + 1, quiet_period_s=QUIET, limit=50, budget_s=60)
                for s in stores
            )
        )
        moved = [t.run_id for result in results for t in result]
        assert sorted(moved) == sorted(run_id(trace) for trace in traces)  # once each
        assert await stores[1].count_runs(status="running") == 0
    finally:
        for engine in engines:
            await engine.dispose()


async def test_a_backlog_larger_than_a_page_is_settled_in_one_sweep(store: SpanStore) -> None:
    """Many tiny runs due at once (e.g. after a burst) are all settled by one sweep call,
    a page per transaction, and late failures of complete runs are seen alongside."""
    t0 = 1_000.0
    traces = [f"b{i:04d}" for i in range(250)]
    failing = set(traces[::7])
    for start in range(0, len(traces), 50):
        batch: list[SpanRecord] = []
        for trace in traces[start : start + 50]:
            root = span(trace, status=StatusCode.ERROR if trace in failing else StatusCode.UNSET)
            batch += [span(trace, parent=root.span_id), root]
        await store.write_spans(batch, received_at=t0)
    pages: list[int] = []
    settle_due = store.settle_due

    async def counting(
        **kwargs: Any,
    ) -> tuple[int, list[tuple[str, RunStatus, RunStatus]], list[tuple[str, int | None]]]:
        seen, moved, pending = await settle_due(**kwargs)
        pages.append(seen)
        return seen, moved, pending

    store.settle_due = counting  # type: ignore[method-assign]
    moved = await lifecycle.sweep(
        store, now=t0 + QUIET + 1, quiet_period_s=QUIET, limit=40, budget_s=60
    )
    assert len(pages) > 1 and max(pages) <= 40  # several small transactions
    assert {t.run_id: t.status.value for t in moved} == {
        run_id(trace): "failed" if trace in failing else "complete" for trace in traces
    }
    assert await store.count_runs(status="running") == 0
    # Nothing is left over for the next sweep.
    assert await sweep(store, t0 + QUIET + 2) == {}
