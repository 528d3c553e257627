"""The span store groups spans into runs: roots, conversations, run facts, posted
outcomes and paging through the run list."""

from __future__ import annotations

import pytest

from faultfinder import conventions as c
from faultfinder.server.store import (
    InvalidCursorError,
    SpanStore,
    UnknownRunError,
)
from tests.integration.stored_spans import SECOND, span, trace_id


async def test_children_arriving_before_their_parents_form_one_run(store: SpanStore) -> None:
    root = span("d1", start=0, duration=60 * SECOND)
    child = span("d1", parent=root.span_id, start=5, duration=10 * SECOND)
    grandchild = span("d1", parent=child.span_id, start=6, duration=70 * SECOND)

    await store.write_spans([grandchild])
    orphan_only = await store.get_run(trace_id("d1"))
    assert orphan_only is not None
    assert orphan_only.root_span_id is None
    await store.write_spans([child])
    await store.write_spans([root])

    run = await store.get_run(trace_id("d1"))
    assert run is not None
    assert run.n_spans == 3
    assert run.root_span_id == root.span_id
    assert run.root_ended
    assert run.started_at == root.start_time_unix_nano
    assert run.ended_at == grandchild.end_time_unix_nano
    assert [s.span_id for s in await store.run_spans(trace_id("d1"))] == [
        root.span_id,
        child.span_id,
        grandchild.span_id,
    ]


async def test_earliest_parentless_span_is_the_root(store: SpanStore) -> None:
    # Grouped by conversation, each turn is a trace with its own parentless span.
    conversation = {c.GEN_AI_CONVERSATION_ID: "conv-e"}
    second_turn = span("e2", start=100, attrs=conversation, by_conversation=True)
    first_turn = span("e1", start=10, attrs=conversation, by_conversation=True)
    third_turn = span("e3", start=200, attrs=conversation, by_conversation=True)

    await store.write_spans([second_turn])
    await store.write_spans([first_turn, third_turn])

    run = await store.get_run("conv-e")
    assert run is not None
    assert run.root_span_id == first_turn.span_id
    assert run.n_spans == 3


async def test_spans_are_grouped_into_runs(store: SpanStore) -> None:
    # Two traces that name the same run, one trace without a run id, and a
    # conversation id that only counts when grouping by conversation.
    tagged = [
        span("f1", attrs={c.RUN_ID: "run-f"}),
        span("f2", attrs={c.RUN_ID: "run-f"}),
        span("f2", parent="ffffffffffffffff", start=1, attrs={c.RUN_ID: "run-f"}),
    ]
    plain = [span("f3", attrs={c.GEN_AI_CONVERSATION_ID: "conv-f"}), span("f3", start=1)]
    await store.write_spans([*tagged, *plain])

    runs, _ = await store.list_runs(limit=10)
    assert {run.id: run.n_spans for run in runs} == {"run-f": 3, trace_id("f3"): 2}

    await store.write_spans(
        [
            span("f4", attrs={c.GEN_AI_CONVERSATION_ID: "conv-g"}, by_conversation=True),
            span("f5", attrs={c.OI_SESSION_ID: "conv-g"}, by_conversation=True),
            span(
                "f6",
                attrs={c.GEN_AI_CONVERSATION_ID: "conv-g", c.RUN_ID: "run-g"},
                by_conversation=True,
            ),
        ]
    )
    conversation = await store.get_run("conv-g")
    assert conversation is not None
    assert conversation.n_spans == 2
    assert [s.trace_id for s in await store.run_spans("conv-g")] == [
        trace_id("f4"),
        trace_id("f5"),
    ]
    assert await store.get_run("run-g") is not None


async def test_run_facts_come_from_span_attributes(store: SpanStore) -> None:
    root = span(
        "g1",
        project="shop",
        attrs={c.RUN_TASK: "Sort the list", c.RUN_GROUND_TRUTH: "[1, 2, 3]"},
    )
    verdict = span(
        "g1",
        parent=root.span_id,
        start=2,
        attrs={
            c.RUN_OUTCOME: "FAILURE",
            c.RUN_OUTCOME_REASON: "wrong order",
            c.RUN_FINAL_ANSWER: "[3, 2, 1]",
        },
    )
    await store.write_spans([root, verdict])
    # A later span claiming success does not undo a reported failure.
    await store.write_spans(
        [span("g1", parent=root.span_id, start=3, attrs={c.RUN_OUTCOME: "success"})]
    )

    run = await store.get_run(trace_id("g1"))
    assert run is not None
    assert (run.project, run.task, run.ground_truth, run.final_answer) == (
        "shop",
        "Sort the list",
        "[1, 2, 3]",
        "[3, 2, 1]",
    )
    assert (run.outcome, run.outcome_reason) == ("failure", "wrong order")
    assert run.status == "running"


async def test_posted_outcome_is_recorded_and_not_overridden_by_spans(store: SpanStore) -> None:
    root = span("i1", attrs={c.RUN_GROUND_TRUTH: "from span"})
    await store.write_spans([root])

    posted = await store.set_outcome(
        trace_id("i1"), "Failure", reason="grader: wrong total", ground_truth="42"
    )
    assert (posted.outcome, posted.outcome_reason, posted.ground_truth) == (
        "failure",
        "grader: wrong total",
        "42",
    )
    await store.write_spans(
        [
            span(
                "i1",
                parent=root.span_id,
                start=1,
                attrs={c.RUN_OUTCOME: "success", c.RUN_GROUND_TRUTH: "7"},
            )
        ]
    )
    run = await store.get_run(trace_id("i1"))
    assert run is not None
    assert (run.outcome, run.ground_truth, run.n_spans) == ("failure", "42", 2)

    with pytest.raises(UnknownRunError, match="no-such-run"):
        await store.set_outcome("no-such-run", "success")
    with pytest.raises(ValueError, match="outcome must be one of"):
        await store.set_outcome(trace_id("i1"), "maybe")


async def test_listing_pages_through_every_run_once_newest_first(store: SpanStore) -> None:
    # Several runs per write call share a creation time; the cursor must still split them.
    labels = [f"j{n:02d}" for n in range(23)]
    for offset in range(0, len(labels), 4):
        group = labels[offset : offset + 4]
        await store.write_spans(
            [span(label, project="odd" if n % 2 else "even") for n, label in enumerate(group)],
            received_at=1_800_000_000 + offset,
        )

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page, cursor = await store.list_runs(limit=5, cursor=cursor)
        pages += 1
        seen += [run.id for run in page]
        assert len(page) <= 5
        if cursor is None:
            break
    assert pages == 5
    assert sorted(seen) == sorted(trace_id(label) for label in labels)
    assert len(seen) == len(set(seen))
    # Newest first: the last write call's runs lead, the first call's runs close the list.
    assert set(seen[:3]) == {trace_id(label) for label in labels[20:]}
    assert set(seen[-4:]) == {trace_id(label) for label in labels[:4]}

    odd, cursor = await store.list_runs(project="odd", limit=50)
    assert cursor is None
    assert len(odd) == 11
    assert all(run.project == "odd" for run in odd)
    running, _ = await store.list_runs(status="running", limit=50)
    assert len(running) == 23
    assert await store.list_runs(status="failed") == ([], None)

    with pytest.raises(InvalidCursorError, match="not one returned"):
        await store.list_runs(cursor="not-a-cursor")
