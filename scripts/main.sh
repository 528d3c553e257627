#!/usr/bin/env bash
# Install into .venv and run the main job on embedded defaults: the sidecar on SQLite,
# a few Who&When failures replayed through OTLP, their attributions printed (zero-LLM
# attributors; add --attributors first_error,all_at_once with a model endpoint for LLM ones).
# It keeps serving the API afterwards; Ctrl-C stops it (--no-serve exits at once).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/faultfinder demo "$@"
