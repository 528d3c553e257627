"""The database schema: migrations match the table models and apply once, from sync code
and from replicas upgrading together."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlmodel import SQLModel

from faultfinder.server.db import models  # noqa: F401  (the tables compared with the migrations)
from faultfinder.server.db.engine import create_engine
from faultfinder.server.db.migrate import upgrade


async def test_migrated_schema_matches_the_models(database_url: str) -> None:
    applied = upgrade(database_url, show_progress=False)
    assert applied[0].revision == "0001"
    assert upgrade(database_url, show_progress=False) == []

    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            diffs = await conn.run_sync(
                lambda sync: compare_metadata(
                    MigrationContext.configure(sync, opts={"compare_type": True}),
                    SQLModel.metadata,
                )
            )
            tables = await conn.run_sync(lambda sync: set(sync.dialect.get_table_names(sync)))
    finally:
        await engine.dispose()
    assert diffs == []
    assert {"spans", "runs", "attributions"} <= tables


def test_upgrade_runs_from_sync_code_and_reports_each_revision(
    sqlite_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="faultfinder.server.db.migrate"):
        applied = upgrade(sqlite_database_url, show_progress=False)
    assert applied
    for revision in applied:
        assert f"applied revision {revision.revision}" in caplog.text


def test_each_applied_revision_is_one_whole_log_line(
    sqlite_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """No docstring line break, escaped or not, in the log; the summary is a whole sentence."""
    with caplog.at_level(logging.INFO):
        applied = upgrade(sqlite_database_url, show_progress=False)
    for record in caplog.records:
        message = record.getMessage()
        assert "\n" not in message and "\\n" not in message, message
    unfinished = next(revision for revision in applied if revision.revision == "0009")
    assert unfinished.description.endswith("whether they were finished without it.")
    assert sum("applied revision 0009" in r.getMessage() for r in caplog.records) == 1
    assert not any("Running upgrade" in r.getMessage() for r in caplog.records)


@pytest.mark.postgres
def test_replicas_upgrading_together_apply_each_revision_once(postgres_database_url: str) -> None:
    with ThreadPoolExecutor(3) as pool:
        results = list(
            pool.map(lambda _: upgrade(postgres_database_url, show_progress=False), range(3))
        )
    # One replica migrated; the others waited for it and found the schema current.
    assert [bool(applied) for applied in results].count(True) == 1
