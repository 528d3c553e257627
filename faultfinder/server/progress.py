"""Progress bars that still show progress when stderr is a file or a pipe, and tables
printed whole there (`table_console`).

rich draws its bars only on a terminal; written to a CI log or `2> run.log` a bar shows
nothing until the job ends (then its final state), so a five-minute benchmark looks
hung. `Progress` here is rich's, plus a plain line per task every `every_s` seconds and
when the task completes whenever the console is not a terminal. On a terminal it is
rich's bar and nothing else.
"""

from __future__ import annotations

import os
import time
from typing import Any

from rich import filesize
from rich import progress as rich_progress
from rich.console import Console
from rich.progress import DownloadColumn, ProgressColumn, TaskID


class Progress(rich_progress.Progress):
    def __init__(
        self, *columns: str | ProgressColumn, every_s: float = 10.0, **kwargs: Any
    ) -> None:
        super().__init__(*columns, **kwargs)
        self._plain = not self.disable and not self.console.is_terminal
        self._bytes = any(isinstance(column, DownloadColumn) for column in self.columns)
        self._every_s = every_s
        self._last_line: dict[TaskID, float] = {}
        self._finished: set[TaskID] = set()

    def _amount(self, value: float) -> str:
        """A count as people write it: bytes as sizes (8.4 MB) when the bar shows a download,
        whole numbers without an exponent."""
        if self._bytes:
            return filesize.decimal(int(value))
        return str(int(value)) if float(value).is_integer() else f"{value:.2f}"

    def update(self, task_id: TaskID, **kwargs: Any) -> None:
        super().update(task_id, **kwargs)
        self._plain_line(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._plain_line(task_id)

    def _plain_line(self, task_id: TaskID) -> None:
        if not self._plain or task_id in self._finished:
            return
        task = self._tasks[task_id]
        now = time.monotonic()
        last = self._last_line.get(task_id)
        if not task.finished and last is not None and now - last < self._every_s:
            return
        self._last_line[task_id] = now
        if task.finished:
            self._finished.add(task_id)
        done = self._amount(task.completed)
        if task.total is not None:
            done += f"/{self._amount(task.total)}"
            if task.total > 0:
                done += f" ({100 * task.completed / task.total:.0f} %)"
        elapsed = task.elapsed or 0.0
        self.console.print(
            f"{task.description}: {done}, {elapsed:.0f} s", markup=False, highlight=False
        )


PIPED_WIDTH = 1000
"""Columns a table may take when its output is not a terminal."""


def table_console(*, stderr: bool = False) -> Console:
    """A console for tables: on a terminal, its width (rich fits and wraps them); written
    to a pipe or a file, the table's own width (up to `PIPED_WIDTH`; `COLUMNS` still wins
    when set), where rich would assume 80 columns and cut the cells to `hand-…`."""
    console = Console(stderr=stderr)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(stderr=stderr, width=PIPED_WIDTH)
