"""The span store on real SQLite and PostgreSQL: spans written once and read back as
sent, concurrent writes, attributions and labels."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from faultfinder import conventions as c
from faultfinder.attributors.model import (
    Attribution,
    AttributionStatus,
    Candidate,
    PredictionSet,
)
from faultfinder.reading.model import SpanEvent, SpanRecord, StatusCode
from faultfinder.server.store import (
    LabelStore,
    SpanStore,
    UnknownRunError,
)
from tests.integration.stored_spans import SECOND, T0, span, trace_id


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
