"""The progress bar of a pass of attributions over records (`bench run`, cross-validation):
description, bar, done of total, elapsed and remaining time."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from faultfinder.server.progress import Progress

__all__ = ["attribution_progress"]


def attribution_progress(console: Console) -> Progress:
    """A bar on `console` that stays on screen when it finishes."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
