"""Run lifecycle on real SQLite and PostgreSQL: when runs become complete or failed (the
quiet period, errors, outcomes).

Times are explicit: spans are written with a `received_at` and sweeps get a `now`.
"""

from __future__ import annotations

import time

from faultfinder import conventions as c
from faultfinder.reading.model import StatusCode
from faultfinder.server.store import SpanStore
from tests.integration.lifecycle_runs import QUIET, run_id, span, status, sweep, write_run


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


async def test_a_root_that_ends_in_error_with_a_failure_outcome_fails_the_run_at_once(
    store: SpanStore,
) -> None:
    """What `r.fail()` sends needs no quiet period; a root ERROR alone, or a failure
    outcome on a root that did not fail, still waits for it (more spans may say more)."""
    t0 = time.time()
    failure = {c.RUN_OUTCOME: "failure"}
    await write_run(store, "g1", t0, status=StatusCode.ERROR, attrs=failure)
    await write_run(store, "g2", t0, status=StatusCode.ERROR)
    await write_run(store, "g3", t0, attrs=failure)

    assert await sweep(store, t0 + 1) == {run_id("g1"): ("running", "failed")}
    # A child that arrives afterwards is stored with the run; the run stays failed.
    root = await store.get_run(run_id("g1"))
    assert root is not None and root.root_span_id is not None
    await store.write_spans([span("g1", parent=root.root_span_id)], received_at=t0 + 2)
    assert await sweep(store, t0 + 3) == {}
    assert len(await store.run_spans(run_id("g1"))) == 3
    assert await status(store, "g1") == "failed"
    assert await sweep(store, t0 + QUIET + 1) == {
        run_id("g2"): ("running", "failed"),
        run_id("g3"): ("running", "failed"),
    }


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
