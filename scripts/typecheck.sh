#!/usr/bin/env bash
# Static checks from the checkout: mypy strict over every part and the tests, then the
# import layers ([tool.importlinter] in pyproject.toml). The folders are the import paths,
# so both read the checkout's files as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== mypy (strict, every part and the tests)" >&2
.venv/bin/mypy -p faultfinder -p tests
# The corpus's agent programs, outside the package (each imports its siblings by name).
.venv/bin/mypy data/corpus/programs
echo "== import layers" >&2
.venv/bin/lint-imports --no-cache
