"""A database that stops taking writes (a read-only SQLite file, PostgreSQL in read-only
mode as after a failover to a standby): ingest answers 503 with Retry-After, so
exporters retry, instead of a 200 that quietly rejects every span, and `/readyz` says
the sidecar is not ready. A stop gives up on the unstored spans after a grace period."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import time
from pathlib import Path

import asyncpg
import httpx
import pytest
from sqlalchemy.engine import make_url

from faultfinder.attributors.model import Step, StepKind, Trajectory
from tests.integration.sidecar import FAULTFINDER, running_sidecar
from tests.otlp_helpers import protobuf_body, trajectory_spans

PROTOBUF = {"content-type": "application/x-protobuf"}


def _body(run: str) -> bytes:
    steps = (
        Step(index=0, agent="user", kind=StepKind.HUMAN, content="Add 2 and 2."),
        Step(index=1, agent="writer", kind=StepKind.MESSAGE, content="4"),
    )
    return protobuf_body(trajectory_spans(Trajectory(run_id=run, task="t", steps=steps)))


def _read_only(database_url: str) -> str:
    """Migrate the database, then make it read-only; the URL to open it with."""
    subprocess.run(
        [str(FAULTFINDER), "db", "upgrade", "--database-url", database_url],
        check=True,
        capture_output=True,
    )
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        return f"sqlite+aiosqlite:///file:{url.database}?mode=ro&uri=true"

    async def alter() -> None:
        admin = url.set(drivername="postgresql", database="postgres")
        connection = await asyncpg.connect(admin.render_as_string(hide_password=False))
        try:
            await connection.execute(
                f'ALTER DATABASE "{url.database}" SET default_transaction_read_only = on'
            )
        finally:
            await connection.close()

    asyncio.run(alter())
    return database_url


def test_a_read_only_database_answers_503_not_a_partial_success(
    database_url: str, tmp_path: Path
) -> None:
    read_only = _read_only(database_url)
    with (
        running_sidecar(read_only, tmp_path, FAULTFINDER_INGEST_ACK_TIMEOUT="3") as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as api,
    ):
        assert api.get("/readyz").status_code == 200  # reads work; no write tried yet
        first = api.post("/v1/traces", content=_body("a"), headers=PROTOBUF)
        assert first.status_code == 503, first.text
        assert first.headers["retry-after"]
        # Later requests are refused at once while the database keeps refusing writes.
        later = api.post("/v1/traces", content=_body("b"), headers=PROTOBUF)
        assert later.status_code == 503 and later.headers["retry-after"]
        assert "not taking writes" in later.text
        ready = api.get("/readyz")
        assert ready.status_code == 503
        assert "writes failing" in ready.json()["details"]["ingest"]
        stats = api.get("/api/stats/ingest").json()
        assert stats["spans_rejected"] == {}  # no span given up as unstorable
        assert stats["spans_acknowledged"] == 0
    # It still stops on SIGTERM, saying what it could not store (none of it acknowledged).
    # (uvicorn ends by re-raising the SIGTERM it handled; -9 would be the test's SIGKILL)
    assert sidecar.process.returncode in (0, -15), sidecar.process.returncode
    assert "none of them was acknowledged" in sidecar.log()


def test_readyz_tells_the_database_error_only_to_a_key_holder(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    read_only = _read_only(sqlite_database_url)
    key = {"authorization": "Bearer k"}
    with (
        running_sidecar(read_only, tmp_path, FAULTFINDER_API_KEYS="k") as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as api,
    ):
        assert api.post("/v1/traces", content=_body("a"), headers=PROTOBUF | key).status_code == 503
        probe = api.get("/readyz")  # a probe carries no key
        assert probe.status_code == 503
        assert probe.json()["details"] == {"ingest": "the database refuses writes"}
        keyed = api.get("/readyz", headers=key)
        assert keyed.status_code == 503
        assert "writes failing" in keyed.json()["details"]["ingest"]


def _immutable(path: Path, on: bool) -> bool:
    """`chattr ±i path`; False where the file system or the user cannot (not root, no
    CAP_LINUX_IMMUTABLE, tmpfs)."""
    done = subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True)
    return done.returncode == 0


def _checkpointed(database: Path) -> None:
    """Copy `database`'s write-ahead log back into it from this process; waits while
    another checkpoint or a writer holds it."""
    deadline = time.monotonic() + 30
    connection = sqlite3.connect(database, isolation_level=None, timeout=30)
    try:
        while True:
            ((busy, log, copied),) = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            if not busy and log == copied:
                return
            assert time.monotonic() < deadline, (busy, log, copied)
            time.sleep(0.05)
    finally:
        connection.close()


def test_an_immutable_wal_index_answers_503_and_the_server_lives(
    sqlite_database_url: str, tmp_path: Path
) -> None:
    # SQLite writes its WAL index (<db>-shm) through a shared memory map; when the file
    # turns immutable under a running server that write used to die of SIGBUS.
    database = Path(make_url(sqlite_database_url).database or "")
    shm = Path(f"{database}-shm")
    with (
        running_sidecar(sqlite_database_url, tmp_path) as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=30) as api,
    ):
        assert api.post("/v1/traces", content=_body("a"), headers=PROTOBUF).status_code == 200
        assert shm.exists()
        # The server checkpoints right after a commit, and a file that turns immutable
        # between its check and its write still kills it (`db/sqlite_files.py`): turn
        # it immutable on an idle server, its log already copied back (by this
        # process), so that checkpoint has nothing left to write.
        _checkpointed(database)
        if not _immutable(shm, True):
            pytest.skip("chattr +i is not permitted here (needs root and CAP_LINUX_IMMUTABLE)")
        try:
            refused = api.post("/v1/traces", content=_body("b"), headers=PROTOBUF)
            assert refused.status_code == 503, refused.text
            assert refused.headers["retry-after"]
            ready = api.get("/readyz")
            assert ready.status_code == 503
            assert api.get("/healthz").status_code == 200
            assert sidecar.process.poll() is None  # alive, not killed by SIGBUS
        finally:
            _immutable(shm, False)
        # Writable again: the writer's next retry stores the queued spans, and then
        # new ones are accepted.
        deadline = time.monotonic() + 30
        while api.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "still not ready 30 s after the fix"
            time.sleep(0.5)
        assert api.post("/v1/traces", content=_body("c"), headers=PROTOBUF).status_code == 200
        assert len(api.get("/api/runs").json()["items"]) == 3  # "b" too: it was queued
        assert api.get("/api/stats/ingest").json()["spans_rejected"] == {}
