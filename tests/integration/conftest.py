"""Integration fixtures: every database test runs on a SQLite file and on PostgreSQL.

`database_url` is an empty database (no schema) that exists only for one test: a file
in `tmp_path`, or a freshly created PostgreSQL database on 127.0.0.1:5432 (user
postgres, trust auth; `FAULTFINDER_TEST_POSTGRES_URL` points elsewhere) that is dropped
afterwards. PostgreSQL tests are skipped only when that server cannot be reached.
`store` is a `SpanStore` on a migrated database shared by the session (one per
dialect) and emptied before each test.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from sqlalchemy.engine import make_url
from sqlmodel import SQLModel

from faultfinder.server.db import models  # noqa: F401  (registers the tables `store` empties)
from faultfinder.server.db.engine import create_engine
from faultfinder.server.db.migrate import upgrade
from faultfinder.server.store import SpanStore
from tests.integration.browser import LIVE_TIMEOUT_MS, launched_chromium, playwright_api

POSTGRES_ADMIN_URL = os.environ.get(
    "FAULTFINDER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
"""An existing database to connect to for CREATE/DROP DATABASE."""

T = TypeVar("T")


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    # Own loop in a worker thread: works whether or not the calling thread runs a loop.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _admin(sql: str) -> None:
    connection = await asyncpg.connect(POSTGRES_ADMIN_URL, timeout=5)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


@cache
def _postgres_unreachable() -> str | None:
    try:
        _run(_admin("SELECT 1"))
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        return f"PostgreSQL at {POSTGRES_ADMIN_URL} is unreachable: {exc}"
    return None


@contextmanager
def _postgres_database() -> Iterator[str]:
    """A new, empty PostgreSQL database, dropped at exit; skips when PostgreSQL is unreachable."""
    reason = _postgres_unreachable()
    if reason is not None:
        pytest.skip(reason)
    name = f"faultfinder_test_{os.getpid()}_{uuid.uuid4().hex[:12]}"
    _run(_admin(f'CREATE DATABASE "{name}"'))
    url = make_url(POSTGRES_ADMIN_URL).set(drivername="postgresql+asyncpg", database=name)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        # FORCE: a sidecar process or pool still connected must not leave the database behind.
        _run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


DIALECTS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


@pytest.fixture
def postgres_database_url() -> Iterator[str]:
    """A new, empty PostgreSQL database for this test, dropped afterwards."""
    with _postgres_database() as url:
        yield url


@pytest.fixture
def sqlite_database_url(tmp_path: Path) -> str:
    """A SQLite file (not yet created) in this test's tmp_path."""
    return f"sqlite+aiosqlite:///{tmp_path / 'faultfinder.db'}"


@pytest.fixture(params=DIALECTS)
def database_url(request: pytest.FixtureRequest) -> str:
    """An empty database for one test, on SQLite and on PostgreSQL (parametrized)."""
    fixture = "sqlite_database_url" if request.param == "sqlite" else "postgres_database_url"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture(scope="session", params=DIALECTS)
def migrated_database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A migrated database shared by the tests of one session (see `store`)."""
    with ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('store') / 'faultfinder.db'}"
        else:
            url = stack.enter_context(_postgres_database())
        upgrade(url, show_progress=False)
        yield url


@pytest.fixture
async def store(migrated_database_url: str) -> AsyncIterator[SpanStore]:
    """A span store on a migrated database, emptied for this test.

    Emptying a session-wide database is much faster than creating and migrating one
    per test; tests that need a database of their own use `database_url`.
    """
    engine = create_engine(migrated_database_url)
    try:
        async with engine.begin() as conn:
            for table in reversed(SQLModel.metadata.sorted_tables):
                await conn.execute(table.delete())
        store = SpanStore(engine)
        yield store
        await store.aclose()
    finally:
        await engine.dispose()


@pytest.fixture
def sync_api() -> Any:
    """Playwright's sync API (the test is skipped without the package)."""
    return playwright_api()


@pytest.fixture
def browser(sync_api: Any) -> Iterator[Any]:
    """Debian's Chromium, headless (tests using it are marked `needs_chromium`)."""
    yield from launched_chromium(sync_api)


@pytest.fixture
def expect(sync_api: Any) -> Any:
    """Playwright's `expect`, waiting up to `LIVE_TIMEOUT_MS`."""
    sync_api.expect.set_options(timeout=LIVE_TIMEOUT_MS)
    return sync_api.expect
