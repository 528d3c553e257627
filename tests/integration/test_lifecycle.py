"""Run lifecycle on real SQLite and PostgreSQL: when runs become complete or failed.

Times are explicit: spans are written with a `received_at` and sweeps get a `now`.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from sqlmodel import SQLModel

from faultfinder import conventions as c
from faultfinder.server import lifecycle
from faultfinder.server.db.engine import create_engine
from faultfinder.server.otlp.model import SpanRecord, StatusCode
from faultfinder.server.store import RunStatus, SpanStore

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


async def test_run_completes_after_the_quiet_period(store: SpanStore) -> None:
    t0 = 1_000.0
    await write_run(store, "a", t0)

    assert await sweep(store, t0 + QUIET - 1) == {}
    assert await status(store, "a") == "running"

    assert await sweep(store, t0 + QUIET + 1) == {run_id("a"): ("running", "complete")}
    run = await store.get_run(run_id("a"))
    assert run is not None
    assert run.status == "complete"
    assert run.completed_at is not None
    # Reported once: the next sweep has nothing to say.
    assert await sweep(store, t0 + QUIET + 2) == {}


async def test_run_whose_spans_keep_arriving_stays_running(store: SpanStore) -> None:
    t0 = 1_000.0
    root = await write_run(store, "b", t0)
    await store.write_spans([span("b", parent=root.span_id)], received_at=t0 + 20)
    await store.write_spans([span("b", parent=root.span_id)], received_at=t0 + 45)

    assert await sweep(store, t0 + QUIET + 20) == {}
    assert await status(store, "b") == "running"
    assert await sweep(store, t0 + 45 + QUIET) == {run_id("b"): ("running", "complete")}


async def test_resent_spans_do_not_keep_a_run_open(store: SpanStore) -> None:
    t0 = 1_000.0
    root = span("b2")
    child = span("b2", parent=root.span_id)
    await store.write_spans([root, child], received_at=t0)
    await store.write_spans([root, child], received_at=t0 + 25)  # exporter retry
    assert await sweep(store, t0 + QUIET + 1) == {run_id("b2"): ("running", "complete")}


async def test_root_span_error_fails_the_run(store: SpanStore) -> None:
    t0 = 1_000.0
    await write_run(store, "c", t0, status=StatusCode.ERROR)
    # A child's error the agents went on from (later work ended well) is not a failure.
    root = span("c2")
    await store.write_spans(
        [
            root,
            span("c2", parent=root.span_id, status=StatusCode.ERROR),
            span("c2", parent=root.span_id, status=StatusCode.OK),
        ],
        received_at=t0,
    )

    assert await sweep(store, t0 + QUIET + 1) == {
        run_id("c"): ("running", "failed"),
        run_id("c2"): ("running", "complete"),
    }


async def test_an_error_that_ended_the_work_fails_the_run_whatever_the_root_says(
    store: SpanStore,
) -> None:
    t0 = 1_000.0
    # OpenAI Agents SDK: the tool and agent spans end in ERROR, then a wrapper span ends
    # OK around them, and the root says OK too.
    root = span("e1", status=StatusCode.OK)
    wrapper = span("e1", parent=root.span_id, status=StatusCode.OK)
    agent = span("e1", parent=wrapper.span_id, status=StatusCode.ERROR)
    tool = span("e1", parent=agent.span_id, status=StatusCode.ERROR)
    # Delivered newest first and in two requests: the order of arrival does not matter.
    await store.write_spans([tool], received_at=t0)
    await store.write_spans([agent, wrapper, root], received_at=t0)
    # smolagents with a failing model: the root never arrives, the last work is an ERROR.
    lost_root = "f" * 16
    first = span("e2", parent=lost_root)
    await store.write_spans(
        [first, span("e2", parent=first.span_id, status=StatusCode.ERROR)], received_at=t0
    )
    # Orphans whose last work ended well complete.
    await store.write_spans(
        [span("e3", parent=lost_root, status=StatusCode.ERROR), span("e3", parent=lost_root)],
        received_at=t0,
    )
    # A graded success wins over the spans' statuses.
    graded = span("e4", status=StatusCode.OK, attrs={c.RUN_OUTCOME: "success"})
    await store.write_spans(
        [graded, span("e4", parent=graded.span_id, status=StatusCode.ERROR)], received_at=t0
    )

    assert await sweep(store, t0 + QUIET + 1) == {
        run_id("e1"): ("running", "failed"),
        run_id("e2"): ("running", "failed"),
        run_id("e3"): ("running", "complete"),
        run_id("e4"): ("running", "complete"),
    }


async def test_outcome_attribute_decides_over_root_status(store: SpanStore) -> None:
    t0 = 1_000.0
    failed_root = span("d1")
    await store.write_spans(
        [failed_root, span("d1", parent=failed_root.span_id, attrs={c.RUN_OUTCOME: "failure"})],
        received_at=t0,
    )
    # The root errored, but the run says it succeeded (e.g. it recovered from a tool error).
    await write_run(store, "d2", t0, status=StatusCode.ERROR, attrs={c.RUN_OUTCOME: "success"})

    assert await sweep(store, t0 + QUIET + 1) == {
        run_id("d1"): ("running", "failed"),
        run_id("d2"): ("running", "complete"),
    }


async def test_posted_outcome_finishes_the_run_at_once(store: SpanStore) -> None:
    t0 = time.time()
    await write_run(store, "e1", t0)
    await write_run(store, "e2", t0)
    await write_run(store, "e3", t0)
    await store.set_outcome(run_id("e1"), "success")
    await store.set_outcome(run_id("e2"), "failure", reason="wrong answer", ground_truth="42")

    assert await sweep(store, t0 + 1) == {
        run_id("e1"): ("running", "complete"),
        run_id("e2"): ("running", "failed"),
    }
    assert await status(store, "e3") == "running"


async def test_late_failure_turns_a_complete_run_failed(store: SpanStore) -> None:
    t0 = time.time() - 2 * QUIET
    await write_run(store, "f1", t0)
    root = await write_run(store, "f2", t0)
    await write_run(store, "f3", t0)
    assert set((await sweep(store, t0 + QUIET + 1)).values()) == {("running", "complete")}

    # A grader posts a failure; a straggler span says the other run failed; a late
    # span without any verdict changes nothing.
    await store.set_outcome(run_id("f1"), "failure", reason="grader: wrong total")
    await store.write_spans(
        [span("f2", parent=root.span_id, attrs={c.RUN_OUTCOME: "failure"})], received_at=t0 + 40
    )
    await store.write_spans([span("f3")], received_at=t0 + 40)

    assert await sweep(store, t0 + 41) == {
        run_id("f1"): ("complete", "failed"),
        run_id("f2"): ("complete", "failed"),
    }
    assert await status(store, "f3") == "complete"


async def test_run_with_only_orphan_spans_completes_after_the_quiet_period(
    store: SpanStore,
) -> None:
    t0 = 1_000.0
    await store.write_spans([span("g", parent="00000000000000aa")], received_at=t0)
    await store.write_spans([span("g", parent="00000000000000aa")], received_at=t0 + 10)

    assert await sweep(store, t0 + QUIET + 1) == {}
    assert await sweep(store, t0 + 10 + QUIET) == {run_id("g"): ("running", "complete")}


async def test_run_whose_root_is_still_in_its_process_waits_then_fails_unfinished(
    store: SpanStore,
) -> None:
    """Spans whose sender says their parent is in the same process, and no root: the
    root is still open (a long model call) or was lost with a crashed process."""
    t0 = 1_000.0
    local = "00000000000000aa"
    await store.write_spans([span("u", parent=local, parent_remote=False)], received_at=t0)
    assert await sweep(store, t0 + QUIET + 1) == {}
    # More work arrives after a pause longer than the quiet period: still the same run.
    await store.write_spans([span("u", parent=local, parent_remote=False)], received_at=t0 + 60)
    assert await sweep(store, t0 + 60 + lifecycle.DEFAULT_UNFINISHED_AFTER_S - 1) == {}
    moved = await sweep(store, t0 + 60 + lifecycle.DEFAULT_UNFINISHED_AFTER_S)
    assert moved == {run_id("u"): ("running", "failed")}
    run = await store.get_run(run_id("u"))
    assert run is not None and run.unfinished and run.n_spans == 2

    # The same with its outcome said to be a success: a success, not unfinished.
    ok = span("v", parent=local, parent_remote=False, attrs={c.RUN_OUTCOME: "success"})
    await store.write_spans([ok], received_at=t0)
    moved = await sweep(store, t0 + lifecycle.DEFAULT_UNFINISHED_AFTER_S)
    assert moved == {run_id("v"): ("running", "complete")}
    run = await store.get_run(run_id("v"))
    assert run is not None and not run.unfinished


async def test_run_awaiting_its_root_fails_at_the_quiet_period_when_an_error_ended_it(
    store: SpanStore,
) -> None:
    t0 = 1_000.0
    local = "00000000000000aa"
    failing = span("w", parent=local, parent_remote=False, status=StatusCode.ERROR)
    await store.write_spans([failing], received_at=t0)
    # An error the agents went on from: the run waits for its root.
    recovered = [
        span("x", parent=local, parent_remote=False, status=StatusCode.ERROR),
        span("x", parent=local, parent_remote=False),
    ]
    await store.write_spans(recovered, received_at=t0)
    assert await sweep(store, t0 + QUIET + 1) == {run_id("w"): ("running", "failed")}
    run = await store.get_run(run_id("w"))
    assert run is not None and not run.unfinished
    assert await status(store, "x") == "running"

    # Its spans are not read again on every sweep: only once another span arrived.
    async def pending(at: float) -> list[str]:
        since = int((at - QUIET) * 1e9)
        settled = await store.settle_due(
            quiet_since=since, unfinished_since=since - 10**12, now=int(at * 1e9)
        )
        return [run for run, _ in settled[2]]

    assert await pending(t0 + QUIET + 2) == []
    await store.write_spans([span("x", parent=local, parent_remote=False)], received_at=t0 + 5)
    assert await pending(t0 + 5 + QUIET + 1) == [run_id("x")]


async def test_span_whose_parent_is_remote_is_the_runs_root(store: SpanStore) -> None:
    """A request's server span continues a trace from another process: it is the root,
    and its run completes once it has ended and the spans are quiet."""
    t0 = 1_000.0
    server = span("y", parent="00000000000000cc", parent_remote=True)
    child = span("y", parent=server.span_id, parent_remote=False)
    await store.write_spans([child], received_at=t0)
    assert await sweep(store, t0 + QUIET + 1) == {}  # the local root is still to come
    await store.write_spans([server], received_at=t0 + 5)
    assert await sweep(store, t0 + 5 + QUIET) == {run_id("y"): ("running", "complete")}
    run = await store.get_run(run_id("y"))
    assert run is not None and run.root_span_id == server.span_id and not run.unfinished


async def test_run_whose_root_has_not_ended_stays_running(store: SpanStore) -> None:
    t0 = 1_000.0
    await write_run(store, "h", t0, ended=False)
    assert await sweep(store, t0 + 10 * QUIET) == {}
    assert await status(store, "h") == "running"


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


async def test_a_trace_that_only_sets_an_agent_up_opens_no_run(store: SpanStore) -> None:
    # autogen-core sends one `create_agent` span, in a trace of its own, per agent built.
    setup = span("g1", attrs={c.GEN_AI_OPERATION_NAME: c.OP_CREATE_AGENT})
    assert await store.write_spans([setup], received_at=1_000.0) == 1
    assert await store.get_run(run_id("g1")) is None
    assert await store.count_runs() == 0
    assert await store.count_spans() == 1  # stored all the same
    # Setting an agent up inside a run is part of that run.
    root = span("g2")
    inside = span("g2", parent=root.span_id, attrs={c.GEN_AI_OPERATION_NAME: c.OP_CREATE_AGENT})
    await store.write_spans([root, inside], received_at=1_000.0)
    run = await store.get_run(run_id("g2"))
    assert run is not None and run.n_spans == 2
