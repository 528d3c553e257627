"""`faultfinder dataset export` refuses a database that is not a sidecar's, with a message
saying so, instead of creating an empty file where it looked."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli.main import main


def export(database: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["dataset", "export", "--database", database])
    return result.exit_code, result.output


def test_a_missing_sqlite_file_is_refused_and_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the wrong folder: no faultfinder.db here
    code, output = export("sqlite+aiosqlite:///faultfinder.db")
    assert code != 0
    assert f"no database at {tmp_path / 'faultfinder.db'}" in output
    assert "absolute path" in output
    assert list(tmp_path.iterdir()) == []


def test_a_database_without_the_schema_is_named_as_such(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE notes (id INTEGER)")
    code, output = export(f"sqlite+aiosqlite:///{other}")
    assert code != 0
    assert "is not a faultfinder database (it has no `labels` table)" in output
    assert "Traceback" not in output


def test_the_sidecars_own_database_exports(migrated_sqlite: str) -> None:
    code, output = export(migrated_sqlite)
    assert code == 0, output
    assert "wrote 0 labelled runs" in output


@pytest.fixture
def migrated_sqlite(tmp_path: Path) -> str:
    from faultfinder.server.db.migrate import upgrade

    url = f"sqlite+aiosqlite:///{tmp_path / 'faultfinder.db'}"
    upgrade(url)
    return url
