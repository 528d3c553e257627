"""Async engine creation for the span store: SQLite (aiosqlite) or PostgreSQL (asyncpg).

SQLite connections get WAL journaling, synchronous=NORMAL, a busy timeout and foreign
keys; JSON goes through orjson on both dialects.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import orjson
import sqlalchemy
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from faultfinder.server.db.sqlite_files import guard_sqlite_files
from faultfinder.server.errors import DatabaseURLError as DatabaseURLError

SUPPORTED_DRIVERS = ("sqlite+aiosqlite", "postgresql+asyncpg")

SQLITE_BUSY_TIMEOUT_MS = 10_000
"""How long a SQLite connection waits for another writer before failing."""

SQLITE_INSERT_PAGE_ROWS = 100
"""Rows per multi-row INSERT statement on SQLite. The ingest writer's batches vary in
size, and each distinct row count is a distinct prepared statement that SQLite keeps in
the connection's statement cache; at SQLAlchemy's default of 1 000 rows those statements
took ~275 MB per connection under overload (the sidecar's RSS crept to 650 MB). At 100
rows the cache stays below ~25 MB, and ingest is as fast."""

SQLITE_CACHED_STATEMENTS = 32
"""Prepared statements each SQLite connection keeps (Python's default is 128)."""

# A JSON-escaped NUL that is not itself an escaped backslash followed by "u0000".
_ESCAPED_NUL = re.compile(rb"(?<!\\)((?:\\\\)*)\\u0000")


def _json_default(value: object) -> object:
    if isinstance(value, bytes | bytearray | memoryview):
        # OTLP bytes attributes: JSON has no bytes, base64 keeps them intact.
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def dumps_json(value: Any) -> str:
    """Serialise a JSON column value (orjson, with fallbacks for what JSON lacks).

    NUL characters become U+FFFD: PostgreSQL's JSONB and text reject them, and one
    such span must not block the whole batch it arrived in.
    """
    try:
        data = orjson.dumps(value, default=_json_default)
    except (orjson.JSONEncodeError, TypeError):
        # orjson refuses integers beyond 64 bits and non-string dict keys; json does not.
        data = json.dumps(value, default=_json_default, ensure_ascii=False).encode()
    if b"\\u0000" in data:
        data = _ESCAPED_NUL.sub(rb"\1\\ufffd", data)
    return data.decode()


def database_url(url: str | URL) -> URL:
    """Parse and check a database URL; raises `DatabaseURLError` naming what is wrong."""
    try:
        parsed = make_url(url)
    except Exception as exc:
        raise DatabaseURLError(f"database URL {str(url)!r} cannot be parsed: {exc}") from None
    if parsed.drivername not in SUPPORTED_DRIVERS:
        raise DatabaseURLError(
            f"database URL {parsed.render_as_string(hide_password=True)!r} uses driver "
            f"{parsed.drivername!r}; use one of {', '.join(SUPPORTED_DRIVERS)}"
        )
    return parsed


def configure_sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        # NORMAL is durable across application crashes in WAL mode and much faster than FULL.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def create_engine(url: str | URL, **kwargs: Any) -> AsyncEngine:
    """An `AsyncEngine` for `sqlite+aiosqlite://…` or `postgresql+asyncpg://…`.

    Extra keyword arguments go to `create_async_engine` (e.g. `echo=True`).
    """
    parsed = database_url(url)
    options: dict[str, Any] = {
        "json_serializer": dumps_json,
        "json_deserializer": orjson.loads,
    }
    if parsed.get_backend_name() == "postgresql":
        # A restarted PostgreSQL must not leave the pool full of dead connections.
        options["pool_pre_ping"] = True
    if parsed.get_backend_name() == "sqlite":
        options["insertmanyvalues_page_size"] = SQLITE_INSERT_PAGE_ROWS
        options["connect_args"] = {"cached_statements": SQLITE_CACHED_STATEMENTS}
    options.update(kwargs)
    engine = create_async_engine(parsed, **options)
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine.sync_engine, "connect", configure_sqlite_connection)
        guard_sqlite_files(engine.sync_engine, parsed.database)
    return engine


def sqlite_engine_beside(source: AsyncEngine, *, pool_size: int, pragma: str) -> Engine:
    """A plain pysqlite engine on the database file of `source` (an async SQLite engine),
    for a thread of the store's own: up to `pool_size` connections, each set up by
    `source`'s own connect listeners (WAL, busy timeout, and whatever else its owner
    added) and then by `pragma` (e.g. `query_only=1`)."""
    listeners = list(source.sync_engine.pool.dispatch.connect)

    def configure(dbapi_connection: Any, record: Any) -> None:
        for listener in listeners:
            listener(dbapi_connection, record)
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA {pragma}")
        finally:
            cursor.close()

    engine = sqlalchemy.create_engine(
        source.url.set(drivername="sqlite+pysqlite"),
        json_serializer=dumps_json,
        json_deserializer=orjson.loads,
        connect_args={"check_same_thread": False, "cached_statements": SQLITE_CACHED_STATEMENTS},
        pool_size=pool_size,
        max_overflow=0,
    )
    event.listen(engine, "connect", configure)
    # Readers too: in WAL mode a reader writes its read mark into the `-shm`.
    guard_sqlite_files(engine, source.url.database)
    return engine
