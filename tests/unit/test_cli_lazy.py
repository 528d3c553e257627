"""The command line loads its heavy commands only when they run, and lists them as they are."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from faultfinder.cli import main
from faultfinder.cli.bench import bench
from faultfinder.cli.dataset import dataset_group
from faultfinder.cli.inject import inject_group
from faultfinder.cli.lazy import LazyGroup

HEAVY_PARTS = (
    "faultfinder.evaluation",
    "faultfinder.training",
    "faultfinder.datasets",
    "faultfinder.injection",
    "faultfinder.drills",
)


@pytest.mark.parametrize(
    "group",
    [main, bench, inject_group, dataset_group],
    ids=["faultfinder", "bench", "inject", "dataset"],
)
def test_each_lazy_command_is_listed_with_its_own_help(group: click.Group) -> None:
    assert isinstance(group, LazyGroup)
    context = click.Context(group)
    for name, (_, listed) in group._lazy.items():
        command = group.get_command(context, name)
        assert command is not None and command.name == name
        assert command.help is not None and " ".join(command.help.split()).startswith(listed)


@pytest.mark.parametrize(
    ("arguments", "listed"),
    [
        (["--help"], ("bench", "train", "inject")),
        (["bench", "--help"], ("run", "chaos")),
        (["inject", "--help"], ("run", "proxy")),
        (["dataset", "--help"], ("convert", "export", "check")),
    ],
    ids=["faultfinder", "bench", "inject", "dataset"],
)
def test_the_help_imports_no_command_behind_it(
    arguments: list[str], listed: tuple[str, ...]
) -> None:
    probe = (
        "import sys\n"
        "from faultfinder.cli import main\n"
        "try:\n"
        f"    main({arguments!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in sys.modules if m.startswith({HEAVY_PARTS!r})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert all(name in result.stdout for name in listed)
