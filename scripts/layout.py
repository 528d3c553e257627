"""Lay the package out in a folder as an install lays it out (pyproject's package-dir).

The editable install maps the top-level folders (server/, attributors/, …) into the
`faultfinder` namespace with an import hook that mypy and import-linter cannot follow:
run from the repository, they see `faultfinder/` alone and take every other part for a
missing module. Checked on this copy, each import resolves as it does installed.

    python scripts/layout.py DEST
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lay_out(destination: Path) -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapping: dict[str, str] = pyproject["tool"]["setuptools"]["package-dir"]
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package, folder in sorted(mapping.items()):
        target = destination.joinpath(*package.split("."))
        shutil.copytree(ROOT / folder, target, ignore=ignore, dirs_exist_ok=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    lay_out(Path(sys.argv[1]))
