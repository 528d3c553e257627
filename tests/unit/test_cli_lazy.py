"""The command line loads its heavy commands only when they run, and lists them as they are."""

from __future__ import annotations

import subprocess
import sys

import click

from faultfinder.cli import main
from faultfinder.cli.main import LazyGroup


def test_each_lazy_command_is_listed_with_its_own_help() -> None:
    assert isinstance(main, LazyGroup)
    context = click.Context(main)
    for name, (_, listed) in main._lazy.items():
        command = main.get_command(context, name)
        assert command is not None and command.name == name
        assert command.help is not None and command.help.strip().splitlines()[0] == listed


def test_the_help_does_not_import_the_benchmarks() -> None:
    probe = (
        "import sys\n"
        "from faultfinder.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('faultfinder.benchmarks')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert "bench" in result.stdout and "train" in result.stdout
