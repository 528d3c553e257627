"""`faultfinder inject …`: labelled failures made from a team's own successful runs
(`faultfinder.injection`), each subcommand imported only when it runs."""

from __future__ import annotations

import click

from faultfinder.cli.lazy import LazyGroup

__all__ = ["inject_group"]


@click.group(
    "inject",
    cls=LazyGroup,
    lazy={
        "run": (
            "faultfinder.injection.command:run_command",
            "Record the program's successful runs, then inject flaws and keep the failures as"
            " labelled runs (in the sidecar, and in OUT/injected.jsonl in the generic format).",
        ),
        "proxy": (
            "faultfinder.injection.command:proxy_command",
            "Serve the replay proxy in record mode",
        ),
        "natural-collect": (
            "faultfinder.injection.natural:natural_command",
            "Gather the natural failures that `faultfinder verify --search earliest` labelled",
        ),
        "flip-rate": (
            "faultfinder.injection.flips:flips_command",
            "Count the kept injected failures that correcting their labelled step made succeed",
        ),
    },
)
def inject_group() -> None:
    """Labelled failures from your own successful runs (controlled failure injection).

    Replay a successful run's exact prefix, plant one flaw of a chosen error mode, let the
    agents continue live, keep what fails."""
