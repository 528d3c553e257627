"""A click group that imports a command's module only when that command runs."""

from __future__ import annotations

import importlib
from typing import Any

import click

__all__ = ["LazyGroup"]


class LazyGroup(click.Group):
    """A group whose heavier commands are imported only when one of them runs (or its own
    help is asked for): `faultfinder --help`, `serve` and `worker` do not load the
    evaluation, the drills, the training code or the local model's tooling, and
    `faultfinder bench --help` loads none of its subcommands."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy
        """Command name → (`module:attribute`, the start of its help shown in the listing)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            target, _ = self._lazy[cmd_name]
            module, attribute = target.split(":")
            command: click.Command = getattr(importlib.import_module(module), attribute)
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in self._lazy:
                rows.append((name, self._lazy[name][1]))
            elif (command := super().get_command(ctx, name)) is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(formatter.width - 6 - len(name))))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
