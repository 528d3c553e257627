#!/usr/bin/env bash
# Install into .venv and run the main job on embedded defaults: the Who&When benchmark
# with the zero-LLM first_error attributor (SQLite-free, no model needed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/faultfinder bench run --dataset who_and_when --attributor first_error "$@"
