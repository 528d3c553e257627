"""The SQLite file check before each transaction (`server/db/sqlite_files.py`) finds a
file that refuses writes, and leaves SQLite's locks alone while it looks."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from faultfinder.server.db.sqlite_files import unwritable_file

_TRY_TO_WRITE = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)
try:
    connection.execute("BEGIN IMMEDIATE")
except sqlite3.OperationalError as error:
    print(error)
else:
    print("got the write lock")
"""


def _wal_database(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("CREATE TABLE t (x)")
    connection.execute("INSERT INTO t VALUES (1)")
    return connection


def _another_process_writes(path: Path) -> str:
    return subprocess.run(
        [sys.executable, "-c", _TRY_TO_WRITE, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


def test_the_check_keeps_the_write_lock_this_process_holds(tmp_path: Path) -> None:
    # Closing any descriptor of a file drops every POSIX lock the process holds on it:
    # a check that opened the files would let another process write beside a writer
    # that believes it holds the lock, and rebuild the `-shm` under its mapping.
    database = tmp_path / "f.db"
    holder = _wal_database(database)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (2)")
    assert _another_process_writes(database) == "database is locked"

    assert unwritable_file(str(database)) is None

    assert _another_process_writes(database) == "database is locked"
    holder.execute("COMMIT")
    assert _another_process_writes(database) == "got the write lock"


def test_absent_files_are_not_refusals(tmp_path: Path) -> None:
    assert unwritable_file(str(tmp_path / "not-yet.db")) is None


def test_an_immutable_wal_index_is_named(tmp_path: Path) -> None:
    database = tmp_path / "f.db"
    holder = _wal_database(database)
    shm = Path(f"{database}-shm")
    if subprocess.run(["chattr", "+i", str(shm)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not permitted here (needs root and CAP_LINUX_IMMUTABLE)")
    try:
        found = unwritable_file(str(database))
    finally:
        subprocess.run(["chattr", "-i", str(shm)], check=True)
        holder.close()
    assert found is not None and found[0] == str(shm)


def _across_an_immutable_wal_index(
    database: Path, script: str, holder: sqlite3.Connection, meanwhile: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `script` on `database` in a process of its own; once it prints "mapped", run
    `meanwhile` on `holder` (another process's connection), turn the `-shm` immutable and
    let the script go on (a line on its stdin). Run apart: SIGBUS kills the process."""
    shm = Path(f"{database}-shm")
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(database)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline().strip() == "mapped"
    if meanwhile:
        holder.execute(meanwhile)
    if subprocess.run(["chattr", "+i", str(shm)], capture_output=True).returncode != 0:
        child.kill()
        child.wait()
        holder.close()
        pytest.skip("chattr +i is not permitted here (needs root and CAP_LINUX_IMMUTABLE)")
    try:
        stdout, stderr = child.communicate("go\n", timeout=60)
    finally:
        subprocess.run(["chattr", "-i", str(shm)], check=True)
        holder.close()
    return subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)


_CHECKPOINT = """
import sqlite3, sys
from faultfinder.server.store.write_thread import WalCheckpointer
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("SELECT count(*) FROM t").fetchall()  # maps the -shm while writable
print("mapped", flush=True)
sys.stdin.readline()  # the -shm turns immutable meanwhile
WalCheckpointer(sys.argv[1])._checkpoint(connection)
print("alive", flush=True)
"""


def test_the_checkpointer_leaves_an_immutable_wal_index_alone(tmp_path: Path) -> None:
    # A checkpoint writes the `-shm` through the memory map its connection made while the
    # file could be written: once immutable, the kernel answers that write with SIGBUS.
    database = tmp_path / "f.db"
    holder = _wal_database(database)
    holder.execute("INSERT INTO t VALUES (3)")
    done = _across_an_immutable_wal_index(database, _CHECKPOINT, holder)
    assert done.returncode == 0 and done.stdout.strip() == "alive", done.stderr[-2000:]


_NEW_CONNECTION = """
import asyncio, sys
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from faultfinder.server.db.engine import create_engine

async def main() -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{sys.argv[1]}")
    async with engine.connect() as first:
        await first.execute(text("SELECT count(*) FROM t"))  # maps the -shm while writable
        print("mapped", flush=True)
        sys.stdin.readline()  # another process writes, then the -shm turns immutable
        try:
            async with engine.connect() as second:  # the pool opens a new connection
                await second.execute(text("SELECT count(*) FROM t"))
        except OperationalError as error:
            print("refused:", error.orig, flush=True)
    await engine.dispose()
    print("alive", flush=True)

asyncio.run(main())
"""


def test_a_new_connection_is_refused_before_its_set_up_reads_an_immutable_wal_index(
    tmp_path: Path,
) -> None:
    # A new connection's set-up (journal mode and the rest) reads the database; a read
    # after another process's commit writes a read mark into the `-shm` through the map
    # the process already has: SIGBUS once that file is immutable, before any transaction
    # of the engine begins.
    database = tmp_path / "f.db"
    holder = _wal_database(database)
    # Another process's commit meanwhile: a new end of the log, so a new read mark.
    done = _across_an_immutable_wal_index(
        database, _NEW_CONNECTION, holder, meanwhile="INSERT INTO t VALUES (4)"
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "refused: attempt to write a readonly database (f.db-shm" in done.stdout
    assert done.stdout.strip().endswith("alive")
