"""Run lifecycle of runs without a finished root: orphan spans, roots still in their
process or remote, traces that only set an agent up.
"""

from __future__ import annotations

from faultfinder import conventions as c
from faultfinder.reading.model import StatusCode
from faultfinder.server import lifecycle
from faultfinder.server.store import SpanStore
from tests.integration.lifecycle_runs import QUIET, run_id, span, status, sweep, write_run


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
