"""The span store on real SQLite and PostgreSQL: writes, runs, paging, attributions, schema."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text
from sqlmodel import SQLModel

from faultfinder import conventions as c
from faultfinder.attributors.model import (
    Attribution,
    AttributionStatus,
    Candidate,
    PredictionSet,
)
from faultfinder.server.db import models  # noqa: F401  (the tables compared with the migrations)
from faultfinder.server.db.engine import create_engine
from faultfinder.server.db.migrate import upgrade
from faultfinder.server.otlp.model import SpanEvent, SpanRecord, StatusCode
from faultfinder.server.store import (
    InvalidCursorError,
    LabelStore,
    SpanStore,
    UnknownRunError,
    write_thread,
)

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
) -> SpanRecord:
    """A span of trace `trace` (a short label, padded to a trace id) starting `start` s after T0."""
    return SpanRecord(
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


def trace_id(label: str) -> str:
    return label.rjust(32, "0")


async def test_spans_sent_twice_are_stored_once(store: SpanStore) -> None:
    root = span("a1")
    children = [span("a1", parent=root.span_id, start=i) for i in range(1, 4)]
    batch = [root, *children]

    assert await store.write_spans(batch) == 4
    assert await store.write_spans(batch) == 0
    # A batch that repeats a span within itself, mixed with one new span.
    extra = span("a1", parent=root.span_id, start=9)
    assert await store.write_spans([children[0], extra, children[0], extra]) == 1

    assert await store.count_spans() == 5
    run = await store.get_run(trace_id("a1"))
    assert run is not None
    assert run.n_spans == 5
    assert len(await store.run_spans(trace_id("a1"))) == 5


async def test_a_stored_span_in_a_later_page_leaves_the_earlier_pages_counted_once(
    store: SpanStore,
) -> None:
    """A write of several INSERT pages whose last page repeats a stored span: the new
    spans are stored once each and their run counts each of them once."""
    root = span("p1")
    resent = span("p1", span_id="f" * 16, parent=root.span_id)
    assert await store.write_spans([root, resent]) == 2
    new = [span("p1", parent=root.span_id, start=i) for i in range(1, 450)]

    assert await store.write_spans([*new, resent]) == len(new)

    run = await store.get_run(trace_id("p1"))
    assert run is not None
    assert run.n_spans == 2 + len(new)
    assert await store.count_spans() == 2 + len(new)


async def _checkpointer_turn(store: SpanStore, passes: int) -> int:
    """Wait (at most 5 s) until the store's WAL checkpointer has tried once more than
    `passes` times; how many it has tried."""
    assert store._write_thread is not None
    checkpointer = store._write_thread.checkpointer
    for _ in range(500):
        if checkpointer.passes > passes:
            break
        await asyncio.sleep(0.01)
    return checkpointer.passes


async def test_the_sqlite_log_is_checkpointed_while_spans_keep_coming(
    sqlite_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Span writes on a SQLite file do not checkpoint the write-ahead log at commit; the
    checkpointer beside them does, so the log stays a fraction of what was written (it
    starts over once it passes its limit) and every span is in the database. Each write
    waits until the checkpointer has had its turn after the one before: how soon a thread
    is scheduled is the machine's, not the store's (a loaded machine starved it once)."""
    monkeypatch.setattr(write_thread, "RESTART_PAGES", 64)
    upgrade(sqlite_database_url, show_progress=False)
    engine = create_engine(sqlite_database_url)
    store = SpanStore(engine)
    log = Path(sqlite_database_url.removeprefix("sqlite+aiosqlite:///") + "-wal")
    payload = {"payload": "x" * 4000}
    written = largest_log = 0
    try:
        passes = 0
        for n in range(60):
            batch = [span(f"w{n}", attrs=payload) for _ in range(20)]
            assert await store.write_spans(batch) == len(batch)
            written += 4000 * len(batch)
            largest_log = max(largest_log, log.stat().st_size)
            passes = await _checkpointer_turn(store, passes)
        assert await store.count_spans() == 60 * 20
    finally:
        await store.aclose()
        await engine.dispose()
    assert written > 4_000_000
    assert largest_log < written / 3


async def test_sqlite_file_reads_see_each_write_at_once_and_never_wait_for_a_writer(
    sqlite_database_url: str,
) -> None:
    """On a SQLite file the API's reads run in threads of their own, beside the span
    writes' thread: a run is read whole as soon as its write returns; while another
    connection holds the write lock (a long sweep, say), reads answer at once rather
    than after the busy timeout; closing the store stops those threads."""
    upgrade(sqlite_database_url, show_progress=False)
    engine = create_engine(sqlite_database_url)
    store = SpanStore(engine)
    runs = [trace_id(f"rr{n}") for n in range(3)]
    try:
        for n, run_id in enumerate(runs):
            root = span(f"rr{n}")
            children = [span(f"rr{n}", parent=root.span_id, start=i) for i in range(1, 4)]
            assert await store.write_spans([root, *children]) == 4
            run = await store.get_run(run_id)
            assert run is not None and run.n_spans == 4
            assert len(await store.run_spans(run_id)) == 4
        async with engine.begin() as writer:
            await writer.execute(text("UPDATE runs SET needs_sweep = needs_sweep"))
            # The write lock is held until this block ends; the busy timeout is 10 s.
            listed, _ = await asyncio.wait_for(store.list_runs(limit=10), timeout=5)
            assert {run.id for run in listed} == set(runs)
            spans = await asyncio.wait_for(store.run_spans(runs[0]), timeout=5)
            assert len(spans) == 4
    finally:
        await store.aclose()
        await engine.dispose()
    assert not [t for t in threading.enumerate() if t.name.startswith("faultfinder-reads")]


async def test_stored_span_reads_back_as_sent(store: SpanStore) -> None:
    sent = SpanRecord(
        trace_id=trace_id("b1"),
        span_id="00000000000000b1",
        parent_span_id=None,
        name="invoke_agent planner",
        start_time_unix_nano=T0,
        end_time_unix_nano=T0 + 5 * SECOND,
        kind=3,
        status_code=StatusCode.ERROR,
        status_message="tool timed out",
        attributes={
            c.GEN_AI_AGENT_NAME: "planner",
            "count": 3,
            "ratio": 0.25,
            "ok": False,
            "tags": ["a", "b"],
            "nested": {"k": [1, 2, {"x": None}]},
            "unicode": "résumé ✓",
        },
        events=(SpanEvent("exception", T0 + SECOND, {"exception.message": "boom"}),),
        resource_attributes={"service.name": "agents"},
        scope_name="openinference.crewai",
        project="checkout",
    )
    await store.write_spans([sent])
    assert await store.run_spans(trace_id("b1")) == [sent]


async def test_text_with_nul_characters_is_stored_without_blocking_the_batch(
    store: SpanStore,
) -> None:
    # PostgreSQL rejects NUL in text and JSONB; the other spans of the batch must still land.
    bad = span("c1", attrs={c.OI_OUTPUT_VALUE: "before\x00after"})
    bad = SpanRecord(**{**_fields(bad), "name": "nul\x00name"})
    good = span("c1", parent=bad.span_id, start=1)
    assert await store.write_spans([bad, good]) == 2
    stored = {s.span_id: s for s in await store.run_spans(trace_id("c1"))}
    assert stored[bad.span_id].name == "nul\ufffdname"
    assert stored[bad.span_id].attributes[c.OI_OUTPUT_VALUE] == "before\ufffdafter"
    assert stored[good.span_id] == good


async def test_spans_sharing_a_resource_read_back_with_their_own_json(store: SpanStore) -> None:
    # Spans decoded from one OTLP resource share its attribute dict; two resources are
    # interleaved in one batch, with values JSON lacks (bytes, NUL, 2**70) in both.
    agents = {"service.name": "agents", "host.id": b"\x01\x02", "note": "a\x00b"}
    tools = {"service.name": "tools", "big": 2**70}
    sent = [
        SpanRecord(
            **{
                **_fields(span("r1", start=i, attrs={"i": i, "blob": b"\xff", "set": (1, 2)})),
                "resource_attributes": agents if i % 2 else tools,
                "events": (SpanEvent("retry", T0 + i, {"n": i, "raw": b"x"}),) if i % 3 else (),
            }
        )
        for i in range(12)
    ]
    assert await store.write_spans(sent) == 12
    stored = {s.span_id: s for s in await store.run_spans(trace_id("r1"))}
    for i, original in enumerate(sent):
        back = stored[original.span_id]
        expected_resource = (
            {"service.name": "agents", "host.id": "AQI=", "note": "a\ufffdb"}
            if i % 2
            else {"service.name": "tools", "big": 2**70}
        )
        assert back.resource_attributes == expected_resource
        assert back.attributes == {"i": i, "blob": "/w==", "set": [1, 2]}
        assert back.events == (
            (SpanEvent("retry", T0 + i, {"n": i, "raw": "eA=="}),) if i % 3 else ()
        )


def _fields(record: SpanRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__slots__}


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
    grouped = SpanStore(store.engine, group_by_conversation=True)
    second_turn = span("e2", start=100, attrs={c.GEN_AI_CONVERSATION_ID: "conv-e"})
    first_turn = span("e1", start=10, attrs={c.GEN_AI_CONVERSATION_ID: "conv-e"})
    third_turn = span("e3", start=200, attrs={c.GEN_AI_CONVERSATION_ID: "conv-e"})

    await grouped.write_spans([second_turn])
    await grouped.write_spans([first_turn, third_turn])

    run = await grouped.get_run("conv-e")
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

    grouped = SpanStore(store.engine, group_by_conversation=True)
    await grouped.write_spans(
        [
            span("f4", attrs={c.GEN_AI_CONVERSATION_ID: "conv-g"}),
            span("f5", attrs={c.OI_SESSION_ID: "conv-g"}),
            span("f6", attrs={c.GEN_AI_CONVERSATION_ID: "conv-g", c.RUN_ID: "run-g"}),
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


async def test_concurrent_writes_to_one_run_lose_no_count(store: SpanStore) -> None:
    root = span("h1")
    batches = [
        [span("h1", parent=root.span_id, start=b * 10 + i) for i in range(10)] for b in range(6)
    ]
    results = await asyncio.gather(*(store.write_spans(batch) for batch in [[root], *batches]))
    assert sum(results) == 61
    run = await store.get_run(trace_id("h1"))
    assert run is not None
    assert run.n_spans == 61
    assert run.root_span_id == root.span_id


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


async def test_attributions_round_trip(store: SpanStore) -> None:
    await store.write_spans([span("k1"), span("k2")])
    first = Attribution(
        method="all_at_once",
        agent="coder",
        step=3,
        reason="Wrote the wrong loop bound.",
        confidence=0.7,
        candidates=(Candidate(step=3, agent="coder", score=0.7, evidence="off by one"),),
        llm_calls=1,
        prompt_tokens=1200,
        completion_tokens=80,
        model="gpt-4o-mini",
    )
    second = Attribution(
        method="step_by_step",
        status=AttributionStatus.FAILED,
        failure_reason="model answered with an unknown agent",
        prediction_set=PredictionSet(lo=2, hi=4, alpha=0.1),
    )
    assert await store.add_attribution(trace_id("k1"), first) != await store.add_attribution(
        trace_id("k1"), second
    )

    assert await store.list_attributions(trace_id("k1")) == [first, second]
    assert await store.list_attributions(trace_id("k2")) == []
    assert await store.attributions_by_run([trace_id("k1"), trace_id("k2")]) == {
        trace_id("k1"): [first, second]
    }
    with pytest.raises(UnknownRunError, match="no-such-run"):
        await store.add_attribution("no-such-run", first)


async def test_migrated_schema_matches_the_models(database_url: str) -> None:
    applied = upgrade(database_url, show_progress=False)
    assert applied[0].revision == "0001"
    assert upgrade(database_url, show_progress=False) == []

    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            diffs = await conn.run_sync(
                lambda sync: compare_metadata(
                    MigrationContext.configure(sync, opts={"compare_type": True}),
                    SQLModel.metadata,
                )
            )
            tables = await conn.run_sync(lambda sync: set(sync.dialect.get_table_names(sync)))
    finally:
        await engine.dispose()
    assert diffs == []
    assert {"spans", "runs", "attributions"} <= tables


def test_upgrade_runs_from_sync_code_and_reports_each_revision(
    sqlite_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="faultfinder.server.db.migrate"):
        applied = upgrade(sqlite_database_url, show_progress=False)
    assert applied
    for revision in applied:
        assert f"applied revision {revision.revision}" in caplog.text


@pytest.mark.postgres
def test_replicas_upgrading_together_apply_each_revision_once(postgres_database_url: str) -> None:
    with ThreadPoolExecutor(3) as pool:
        results = list(
            pool.map(lambda _: upgrade(postgres_database_url, show_progress=False), range(3))
        )
    # One replica migrated; the others waited for it and found the schema current.
    assert [bool(applied) for applied in results].count(True) == 1


async def test_sqlite_connections_use_wal_and_foreign_keys(sqlite_database_url: str) -> None:
    upgrade(sqlite_database_url, show_progress=False)
    engine = create_engine(sqlite_database_url)
    try:
        async with engine.connect() as conn:
            journal = (await conn.execute(text("PRAGMA journal_mode"))).scalar_one()
            foreign_keys = (await conn.execute(text("PRAGMA foreign_keys"))).scalar_one()
    finally:
        await engine.dispose()
    assert (journal, foreign_keys) == ("wal", 1)


async def test_labels_keep_their_source_mode_and_details(store: SpanStore) -> None:
    """An injected failure's exact label keeps what made it (mode, the injected text), NUL
    characters included, next to a person's label, on both dialects."""
    await store.write_spans([span("l1")])
    labels = LabelStore(store.engine)
    person = await labels.add(trace_id("l1"), agent="coder", step=0, reason="typo", author="ana")
    injected = await labels.add(
        trace_id("l1"),
        agent="coder",
        step=0,
        reason="injected R.3",
        author=None,
        mode="R.3",
        source="injected",
        details={"original": "522,250", "injected": "225,520\x00", "call": 2, "nested": [{"a": 1}]},
    )
    assert (person.source, person.mode, person.details) == ("human", None, None)
    read = await labels.for_run(trace_id("l1"))
    assert [label.source for label in read] == ["human", "injected"]
    assert read[1].mode == "R.3"
    assert read[1].details == {
        "original": "522,250", "injected": "225,520\ufffd", "call": 2, "nested": [{"a": 1}],
    }  # fmt: skip
    assert (await labels.latest_by_run())[trace_id("l1")].id == injected.id
