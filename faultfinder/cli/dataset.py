"""`faultfinder dataset …`: labelled runs in the generic format (`faultfinder.datasets`),
each subcommand imported only when it runs."""

from __future__ import annotations

import click

from faultfinder.cli.lazy import LazyGroup

__all__ = ["dataset_group"]


@click.group(
    "dataset",
    cls=LazyGroup,
    lazy={
        "convert": (
            "faultfinder.datasets.command:convert",
            "Convert SPEC's labelled records to the generic format.",
        ),
        "export": (
            "faultfinder.datasets.command:export",
            "Export a sidecar database's labelled runs (people's labels and injected failures)",
        ),
        "check": (
            "faultfinder.datasets.command:check",
            "Read every record of SPEC and print what it holds: records per subset, label"
            " sources, error modes, steps by role.",
        ),
        "stats": (
            "faultfinder.datasets.command:stats",
            "How much each SPEC looks like real failures",
        ),
    },
)
def dataset_group() -> None:
    """Labelled runs in the generic format: convert datasets, export a sidecar's labels.

    The format is JSON Lines of faultfinder's own trajectories with explicit step roles
    and the label (docs/datasets.md)."""
