"""Placeholder for `faultfinder bench run`."""

import click


@click.command(name="run")
def run_command() -> None:
    """Not implemented yet."""
    raise click.ClickException("not implemented yet")
