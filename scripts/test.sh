#!/usr/bin/env bash
# Install into .venv and run every check: ruff (lint + format), mypy, the whole pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --llm
echo "== ruff" >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy" >&2
.venv/bin/mypy attributors sdk
echo "== pytest" >&2
exec .venv/bin/pytest -q -p no:cacheprovider "$@"
