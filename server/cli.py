"""The `faultfinder` command line: the sidecar, its database and the benchmarks."""

from __future__ import annotations

import click

from faultfinder import __version__
from faultfinder.benchmarks.cli import bench


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="faultfinder")
def main() -> None:
    """faultfinder: who failed, when, and why — failure attribution for LLM agents."""


main.add_command(bench)
