"""Progress is visible in a log file, not only on a terminal."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, TextColumn

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


def test_a_download_logs_human_readable_sizes() -> None:
    log = io.StringIO()
    with Progress(
        TextColumn("joining smollm2"), BarColumn(), DownloadColumn(), console=Console(file=log)
    ) as bar:
        task = bar.add_task("joining smollm2", total=None)
        bar.update(task, completed=8_388_608, total=1_117_320_000)
        bar.update(task, completed=1_117_320_000, total=1_117_320_000)
    lines = [line for line in log.getvalue().splitlines() if line.startswith("joining smollm2:")]
    assert [line.split(",")[0] for line in lines] == [
        "joining smollm2: 8.4 MB/1.1 GB (1 %)",
        "joining smollm2: 1.1 GB/1.1 GB (100 %)",
    ]
    assert "e+" not in log.getvalue()


def test_large_counts_are_whole_numbers() -> None:
    log = io.StringIO()
    with Progress(TextColumn("{task.description}"), console=Console(file=log)) as bar:
        task = bar.add_task("spans", total=2_000_000)
        bar.update(task, completed=2_000_000)
    assert "spans: 2000000/2000000 (100 %)" in log.getvalue()
