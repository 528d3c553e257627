"""SQLite span writes in a thread of their own, with the WAL checkpointed beside them.

Through the async driver every statement of a span write is a round trip between the
event loop and the driver's thread, and each waits for the loop, which is busy decoding
the next requests. Here a whole write transaction (its INSERT pages, the runs' upsert,
the commit) is one call into one thread, over a plain pysqlite connection to the same
database file.

That connection does not checkpoint the write-ahead log at commit, as SQLite does by
default every 1,000 pages: the checkpoint (copying the log into the database file and
syncing it) would sit in the middle of the writer's path. `WalCheckpointer` runs it in a
thread and connection of its own after writes, in PASSIVE mode (it never blocks a writer);
once the log passes `RESTART_PAGES` the write thread runs one RESTART checkpoint between
two writes, so that the log starts over instead of growing under a steady load. Together
they took SQLite ingest on the defaults from 10.7-13.1k to 13.1-19.0k durable spans/s on
a two-core machine, and the p99 at 7,500 spans/s offered from 26-59 ms to 13-15 ms
(`reports/ingest.md`).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import sqlalchemy
from sqlalchemy import URL
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from faultfinder.server.db.engine import sqlite_engine_beside
from faultfinder.server.db.sqlite_files import unwritable_file

__all__ = ["RESTART_PAGES", "SqliteWriteThread", "WalCheckpointer", "file_database"]

log = logging.getLogger(__name__)

T = TypeVar("T")

CHECKPOINT_EVERY_S = 1.0
"""Longest pause between two checkpoints while writes keep coming (they wake it sooner)."""

CHECKPOINT_BUSY_TIMEOUT_MS = 1_000
"""How long a RESTART checkpoint waits for readers of older log frames. It holds new writes
back while it waits, so this bounds what it can add to an ingest request; one that times
out is tried again after the next write."""

RESTART_PAGES = 16_384
"""Log pages (64 MiB at 4 KiB) past which the write thread itself runs a RESTART checkpoint
between two writes, so that the log starts over from its beginning. Under a steady load a
PASSIVE checkpoint never catches up with the last commit (the log only starts over when a
write finds it all copied), and a checkpoint from another connection would have to wait
for a gap between writes that a steady load may never leave; the log would grow for as
long as the load lasts. Most of it has been copied by then, so the RESTART is short."""


def file_database(url: URL) -> str | None:
    """The database file of a SQLite URL given as a plain path; None for an in-memory
    database (a second connection to it would open another, empty one) and for a `file:`
    URI (`?uri=true`), which the store then writes through its async engine as before."""
    database = url.database
    if not database or database.startswith((":memory:", "file:")):
        return None
    if {"uri", "mode"} & set(url.query):
        return None
    return database


class WalCheckpointer:
    """Checkpoints a SQLite database's write-ahead log in a thread of its own."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="faultfinder-wal-checkpoint", daemon=True
        )
        self.lock = threading.Lock()
        """Held while a checkpoint runs: SQLite refuses a second one at once (busy) rather
        than waiting for the first."""
        self.restart_wanted = threading.Event()
        """Set when the log has grown past `RESTART_PAGES` (the write thread restarts it)."""
        self.passes = 0
        """Checkpoints tried so far: what a caller waits on to know one ran after a write."""

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Something was committed: checkpoint soon."""
        self._wake.set()

    def stop(self) -> None:
        """Checkpoint what is left and stop (waits for the thread)."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        try:
            connection = sqlite3.connect(self._path, isolation_level=None)
        except sqlite3.Error as error:
            log.warning("cannot open %s to checkpoint it: %s", self._path, error)
            return
        try:
            connection.execute(f"PRAGMA busy_timeout={CHECKPOINT_BUSY_TIMEOUT_MS}")
            while True:
                self._wake.wait(CHECKPOINT_EVERY_S)
                self._wake.clear()
                self._checkpoint(connection)
                self.passes += 1
                if self._stop.is_set():
                    return
        finally:
            connection.close()

    def _checkpoint(self, connection: sqlite3.Connection) -> None:
        try:
            with self.lock:
                # A checkpoint writes the `-shm` too, and this connection is no engine's:
                # the same check as every transaction's (`db/sqlite_files.py`), or SIGBUS.
                # Made once the lock is held, right before the checkpoint: the wait for
                # the lock (a long write) must not fall between the check and the write.
                refused = unwritable_file(self._path)
                if refused is not None:
                    log.debug(
                        "checkpoint of %s deferred: %s refuses writes", self._path, refused[0]
                    )
                    return
                # fetchall, not fetchone: a statement left unfinished keeps a read
                # snapshot open, and the log cannot start over while anyone reads it.
                ((_busy, pages, _copied),) = connection.execute(
                    "PRAGMA wal_checkpoint(PASSIVE)"
                ).fetchall()
            if pages > RESTART_PAGES:
                self.restart_wanted.set()
        except sqlite3.Error as error:  # locked for longer than the busy timeout, say
            log.debug("checkpoint of %s deferred: %s", self._path, error)


class SqliteWriteThread:
    """One thread, one pysqlite connection and one checkpointer for the database file of
    `source` (an async SQLite engine). The connection is set up by `source`'s own connect
    listeners (WAL, busy timeout, and whatever else its owner added), then stops
    checkpointing at commit."""

    def __init__(self, source: AsyncEngine, path: str) -> None:
        self.engine: Engine = sqlite_engine_beside(
            source, pool_size=1, pragma="wal_autocheckpoint=0"
        )
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="faultfinder-span-writes")
        self.checkpointer = WalCheckpointer(path)
        self.checkpointer.start()

    async def run(self, write: Callable[..., T], *args: Any) -> T:
        """`write(*args)` in the write thread; the checkpointer is woken afterwards,
        whether it committed or not."""
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._executor, self._write, write, args
            )
        finally:
            self.checkpointer.wake()

    def _write(self, write: Callable[..., T], args: tuple[Any, ...]) -> T:
        if self.checkpointer.restart_wanted.is_set():
            self.checkpointer.restart_wanted.clear()
            self._restart_log()
        return write(*args)

    def _restart_log(self) -> None:
        """RESTART checkpoint on the write connection, between two writes, waiting at most
        `CHECKPOINT_BUSY_TIMEOUT_MS` for readers (its usual busy timeout is restored)."""
        try:
            with self.checkpointer.lock, self.engine.connect() as conn:
                usual = conn.exec_driver_sql("PRAGMA busy_timeout").scalar()
                conn.exec_driver_sql(f"PRAGMA busy_timeout={CHECKPOINT_BUSY_TIMEOUT_MS}")
                try:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(RESTART)").all()
                finally:
                    conn.exec_driver_sql(f"PRAGMA busy_timeout={int(usual or 0)}")
        except sqlalchemy.exc.DBAPIError as error:
            log.debug("log restart deferred: %s", error)

    def close(self) -> None:
        """Finish the write under way, close the connection and checkpoint the rest."""
        self._executor.shutdown(wait=True)
        self.engine.dispose()
        self.checkpointer.stop()
