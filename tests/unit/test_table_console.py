"""Tables written to a pipe or a file come out whole, not cut to 80 columns."""

from __future__ import annotations

import pytest
from rich.table import Table

from faultfinder.server.progress import table_console


def scores_table() -> Table:
    """A `bench run`-shaped table, about 130 columns wide."""
    table = Table(title="who&when scores")
    for header in ("attributor", "subset", "records", "agent acc", "step acc", "step ±1",
                   "official agent", "official step", "expected (random)"):  # fmt: skip
        table.add_column(header)
    for subset in ("algorithm-generated", "hand-crafted", "overall"):
        table.add_row("all_at_once", subset, "126", "54.8%", "14.3%", "31.0%", "54.8%",
                      "14.3%", "27.1 / 3.2")  # fmt: skip
    return table


def test_a_piped_table_is_printed_at_its_full_width(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    table_console().print(scores_table())
    out = capsys.readouterr().out
    assert "…" not in out
    assert "hand-crafted" in out and "algorithm-generated" in out and "expected (random)" in out
    assert max(len(line) for line in out.splitlines()) > 80


def test_columns_set_by_the_user_still_bound_a_piped_table(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    table_console().print(scores_table())
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 100
