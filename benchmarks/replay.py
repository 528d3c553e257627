"""Placeholder for `faultfinder bench replay`."""

import click


@click.command(name="replay")
def replay_command() -> None:
    """Not implemented yet."""
    raise click.ClickException("not implemented yet")
