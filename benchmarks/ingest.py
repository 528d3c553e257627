"""Placeholder for `faultfinder bench ingest`."""

import click


@click.command(name="ingest")
def ingest_command() -> None:
    """Not implemented yet."""
    raise click.ClickException("not implemented yet")
