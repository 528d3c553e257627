"""SQLite reads of the API, each whole in one call to a thread of their own.

Through the async driver every step of a read (taking a connection, executing, each
fetch, closing the cursor, ending the transaction) is a round trip between the event loop
and the driver's thread, and each waits for the loop. When ingest keeps the loop busy,
every one of those trips waits behind the requests queued on it: under a pinned 2×
overload the spans of an 11-span run took up to 1.9 s to read. Here the whole read is one
call into a thread, over a plain pysqlite connection to the same database file: it waits
for the loop once, when it is done. Readers never wait for the span writes (WAL), and
these connections refuse to write. With the listing's reads joined and its runs
summarised at once (`RunService.list_runs`), `GET /api/runs` under that overload went
from p50 432-450 ms / p99 3.5-4.9 s to 257-348 ms / 1.4-1.9 s
(`reports/ingest.md`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from faultfinder.server.db.engine import sqlite_engine_beside

__all__ = ["READ_THREADS", "SqliteReadThreads"]

T = TypeVar("T")

READ_THREADS = 4
"""Reads at once: one long read (a run of many thousand spans) leaves others a thread."""


class SqliteReadThreads:
    """`READ_THREADS` threads, each with its own pysqlite connection to the database file
    of `source` (an async SQLite engine), set up by `source`'s own connect listeners (WAL,
    busy timeout, …) and then made read-only (`PRAGMA query_only`)."""

    def __init__(self, source: AsyncEngine, threads: int = READ_THREADS) -> None:
        self.engine: Engine = sqlite_engine_beside(source, pool_size=threads, pragma="query_only=1")
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="faultfinder-reads")

    async def run(self, read: Callable[[Connection], T]) -> T:
        """`read(connection)` in a read thread; it must fetch everything it returns."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._read, read)

    def _read(self, read: Callable[[Connection], T]) -> T:
        with self.engine.connect() as conn:
            return read(conn)

    def close(self) -> None:
        """Finish the reads under way and close the connections."""
        self._executor.shutdown(wait=True)
        self.engine.dispose()
