#!/usr/bin/env bash
# Static checks of the package as installed (scripts/layout.py says why): mypy strict over
# every part and the tests, then the import layers ([tool.importlinter] in pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
.venv/bin/python scripts/layout.py "$scratch/site"
# The tests beside it, importing it as they do when they run.
cp -r tests "$scratch/site/tests"
cp pyproject.toml "$scratch/"
# From the scratch folder, so that `faultfinder` is the copy, not this checkout's folder.
cd "$scratch/site"
echo "== mypy (strict, every part and the tests)" >&2
"$root/.venv/bin/mypy" --config-file ../pyproject.toml --cache-dir "$root/.mypy_cache/installed" -p faultfinder -p tests
echo "== import layers" >&2
PYTHONPATH="$scratch/site" "$root/.venv/bin/lint-imports" --no-cache ../pyproject.toml
