"""The span store on a SQLite file: its log is checkpointed under load, reads never wait
for the writer, and connections use WAL and foreign keys."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from faultfinder.server.db.engine import create_engine
from faultfinder.server.db.migrate import upgrade
from faultfinder.server.store import (
    SpanStore,
    write_thread,
)
from tests.integration.stored_spans import span, trace_id


async def _checkpointer_turn(store: SpanStore, passes: int) -> int:
    """Wait (at most 5 s) until the store's WAL checkpointer has tried once more than
    `passes` times; how many it has tried."""
    assert store._writes.write_thread is not None
    checkpointer = store._writes.write_thread.checkpointer
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
