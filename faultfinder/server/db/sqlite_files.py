"""A SQLite database whose files refuse writes at the file-system level is reported as a
read-only database, before SQLite touches them.

In WAL mode SQLite maps `<db>-shm` into memory and writes to it at every commit (and
when a reader takes a read mark). If the file cannot be written — `chattr +i`, a
permission or mount changed under a running server — the kernel answers that write with
SIGBUS, which kills the whole process: no 503, no `/readyz`. So each new connection
(whose set-up reads the database, taking a read mark) and each transaction first asks
the kernel whether the database's files may be written (three `access` calls, some
microseconds); one that refuses raises a SQLITE_READONLY `OperationalError`, which every
caller already treats as "the database refuses writes": ingest answers 503 + Retry-After
and keeps the spans queued, `/readyz` answers 503, background rounds try again later.

The check must not open the files: closing any descriptor of a file drops every POSIX
lock the process holds on it, SQLite's WAL locks among them, and another connection
then rebuilds the `-shm` under a live mapping — the very SIGBUS this guards against
(seen under load with a worker process on the same database). `access(2)` opens
nothing and refuses writing on an immutable file (EPERM) or a read-only mount (EROFS)
as `open` would.

What no check closes: a file that turns unwritable between the check and SQLite's write
(a transaction or a checkpoint under way, some milliseconds) still kills the process.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from typing import Any

from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine

__all__ = ["guard_sqlite_files", "unwritable_file"]

SQLITE_READONLY = 8


def unwritable_file(database: str) -> tuple[str, OSError] | None:
    """The first of `database`, its `-wal` and its `-shm` that exists and may not be
    written, with the error; None when all may (or none exists yet). Opens nothing
    (module docstring)."""
    for path in (database, f"{database}-wal", f"{database}-shm"):
        if os.access(path, os.W_OK, effective_ids=True):
            continue
        try:  # refused, or absent: `access` says only False
            read_only = os.statvfs(path).f_flag & os.ST_RDONLY
        except OSError:
            continue  # absent (or vanished): nothing to write yet
        code = errno.EROFS if read_only else errno.EPERM
        return path, OSError(code, os.strerror(code), path)
    return None


def guard_sqlite_files(engine: Engine, database: str | None) -> None:
    """Check `database`'s files when `engine` opens a connection, before any other
    set-up of it, and before each transaction (module docstring). An in-memory database
    (no file) is left alone."""
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return

    def check(*_event_args: Any) -> None:
        found = unwritable_file(database)
        if found is None:
            return
        path, error = found
        orig = sqlite3.OperationalError(
            f"attempt to write a readonly database ({os.path.basename(path)}: {error.strerror})"
        )
        orig.sqlite_errorcode = SQLITE_READONLY  # type: ignore[attr-defined]
        orig.sqlite_errorname = "SQLITE_READONLY"  # type: ignore[attr-defined]
        raise sa_exc.OperationalError("BEGIN", None, orig)

    event.listen(engine, "connect", check, insert=True)
    event.listen(engine, "begin", check)
