"""Which SQLite URLs get the write thread: only those naming a database file plainly."""

from __future__ import annotations

import pytest
from sqlalchemy import make_url

from faultfinder.server.store.write_thread import file_database


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite+aiosqlite:////var/lib/faultfinder/ff.db", "/var/lib/faultfinder/ff.db"),
        ("sqlite+aiosqlite:///faultfinder.db", "faultfinder.db"),
        ("sqlite+aiosqlite://", None),
        ("sqlite+aiosqlite:///:memory:", None),
        # A URI would be opened by the checkpointer as a file literally named "file:…".
        ("sqlite+aiosqlite:///file:ff.db?uri=true", None),
        ("sqlite+aiosqlite:///file::memory:?cache=shared&uri=true", None),
    ],
)
def test_only_a_plain_database_file_is_written_from_its_own_thread(
    url: str, path: str | None
) -> None:
    assert file_database(make_url(url)) == path
