#!/usr/bin/env bash
# The import layers ([tool.importlinter] in pyproject.toml), checked on the package laid
# out as an install lays it out (pyproject's package-dir, copied into a scratch folder):
# the editable install maps the top-level folders into the `faultfinder` namespace, which
# the import graph cannot walk.
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
.venv/bin/python - "$scratch/site" <<'PY'
import shutil
import sys
import tomllib
from pathlib import Path

site = Path(sys.argv[1])
mapping = tomllib.loads(Path("pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
for package, folder in sorted(mapping.items()):
    target = site.joinpath(*package.split("."))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(folder, target, ignore=ignore, dirs_exist_ok=True)
PY
# From the scratch folder, so that `faultfinder` is the copy on PYTHONPATH, not this
# checkout's folder of that name.
cp pyproject.toml "$scratch/"
cd "$scratch"
PYTHONPATH="$scratch/site" "$OLDPWD/.venv/bin/lint-imports" --no-cache pyproject.toml
