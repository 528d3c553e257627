"""Progress is visible in a log file, not only on a terminal."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import BarColumn, TextColumn

from faultfinder.server.progress import Progress


def _run(console: Console, every_s: float, steps: int = 4) -> None:
    with Progress(
        TextColumn("{task.description}"), BarColumn(), console=console, every_s=every_s
    ) as bar:
        task = bar.add_task("cv: 4 folds", total=steps)
        for _ in range(steps):
            bar.advance(task)


def test_a_log_file_gets_a_line_per_update_and_one_at_the_end() -> None:
    log = io.StringIO()
    _run(Console(file=log, width=100), every_s=0)
    lines = [line for line in log.getvalue().splitlines() if line.startswith("cv: 4 folds:")]
    assert [line.split(",")[0] for line in lines] == [
        "cv: 4 folds: 1/4 (25 %)",
        "cv: 4 folds: 2/4 (50 %)",
        "cv: 4 folds: 3/4 (75 %)",
        "cv: 4 folds: 4/4 (100 %)",
    ]
    assert all(line.endswith(" s") for line in lines)


def test_lines_are_spaced_out_but_the_finish_is_always_said() -> None:
    log = io.StringIO()
    _run(Console(file=log, width=100), every_s=3600, steps=50)
    lines = [line for line in log.getvalue().splitlines() if line.startswith("cv: 4 folds:")]
    assert [line.split(",")[0] for line in lines] == [
        "cv: 4 folds: 1/50 (2 %)",
        "cv: 4 folds: 50/50 (100 %)",
    ]


def test_a_terminal_gets_the_bar_only() -> None:
    screen = io.StringIO()
    _run(Console(file=screen, width=100, force_terminal=True), every_s=0)
    assert "cv: 4 folds:" not in screen.getvalue()
    assert "cv: 4 folds" in screen.getvalue()


def test_a_disabled_bar_prints_nothing() -> None:
    log = io.StringIO()
    with Progress(console=Console(file=log), disable=True, every_s=0) as bar:
        task = bar.add_task("quiet", total=2)
        bar.advance(task, 2)
    assert log.getvalue() == ""
