"""Packaging: public surface, one `faultfinder` namespace, a Dockerfile that runs the real CLI."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import faultfinder.attributors as attributors
from faultfinder.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_attributors_public_surface_is_pinned() -> None:
    assert sorted(attributors.__all__) == [
        "AttributeOptions",
        "Attribution",
        "AttributionStatus",
        "Attributor",
        "Candidate",
        "PredictionSet",
        "Step",
        "StepKind",
        "StepStatus",
        "Trajectory",
        "UnknownAttributorError",
        "available_attributors",
        "get_attributor",
        "normalise_agent",
        "register",
        "validate_against",
    ]
    for name in attributors.__all__:
        assert hasattr(attributors, name), name


def test_every_cli_command_has_help() -> None:
    runner = CliRunner()

    def walk(command: object, path: list[str]) -> None:
        result = runner.invoke(main, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage:" in result.output
        for name in getattr(command, "commands", {}):
            walk(command.commands[name], [*path, name])  # type: ignore[attr-defined]

    walk(main, [])


def test_dockerfile_installs_the_project_and_enters_the_console_script() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    scripts = pyproject["project"]["scripts"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["faultfinder"]' in dockerfile
    assert "faultfinder" in scripts
    assert "pip install --no-cache-dir ." in dockerfile
    # The package is one folder; it must be copied into the image whole.
    assert pyproject["tool"]["setuptools"]["packages"]["find"]["include"] == ["faultfinder*"]
    assert "COPY faultfinder ./faultfinder" in dockerfile


@pytest.mark.slow
def test_wheel_has_only_the_faultfinder_namespace(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
    )
    (wheel,) = tmp_path.glob("faultfinder-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names}
    assert top_level == {
        "faultfinder",
        f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info",
    }
    for part in ("attributors", "reading", "server", "sdk", "evaluation", "training"):
        assert f"faultfinder/{part}/__init__.py" in names
    assert (
        "faultfinder/server/db/alembic.ini" in names
        or not (ROOT / "faultfinder/server/db/alembic.ini").exists()
    )
