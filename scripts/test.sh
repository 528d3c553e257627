#!/usr/bin/env bash
# Install into .venv and run every check: ruff (lint + format), mypy, the import layers, the
# whole pytest suite,
# then the agent frameworks' conformance suite (one nox environment per framework).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --llm
echo "== ruff" >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
bash scripts/typecheck.sh  # mypy strict and the import layers, from the checkout
echo "== pytest" >&2
.venv/bin/pytest -q -p no:cacheprovider "$@"
# The conformance suite: each agent framework in its own environment, with its own
# instrumentation, against a real sidecar (tests/frameworks/, noxfile.py).
echo "== conformance" >&2
.venv/bin/nox -s conformance
