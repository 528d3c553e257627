"""Alembic environment of the span store: async engines, batch mode on SQLite.

`faultfinder.server.db.migrate.upgrade` hands in an open connection (and a progress
callback) through `config.attributes`; the Alembic command line gets an engine built
from `FAULTFINDER_DATABASE_URL` or `sqlalchemy.url`.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from alembic import context
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

from faultfinder.server.db import models  # noqa: F401  (registers the tables)
from faultfinder.server.db.engine import create_engine

config = context.config
target_metadata = SQLModel.metadata


def _url() -> str:
    return os.environ.get("FAULTFINDER_DATABASE_URL") or config.get_main_option(
        "sqlalchemy.url", ""
    )


def _configure(connection: Connection) -> None:
    options: dict[str, Any] = {}
    on_version_apply = config.attributes.get("on_version_apply")
    if on_version_apply is not None:
        options["on_version_apply"] = on_version_apply
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode recreates the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        **options,
    )


def _run_on_connection(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_own_engine() -> None:
    engine = create_engine(_url())
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_on_connection)
            await connection.commit()
    finally:
        await engine.dispose()


def run_migrations_offline() -> None:
    """Emit SQL to stdout instead of running it (`alembic upgrade --sql`)."""
    url = _url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection: Connection | None = config.attributes.get("connection")
    if connection is not None:
        _run_on_connection(connection)
    else:
        asyncio.run(_run_with_own_engine())


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
