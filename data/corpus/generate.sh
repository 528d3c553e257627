#!/usr/bin/env bash
# Generate the injected corpus (data/corpus/DATASHEET.md): for each framework's team
# program, record its successful runs on the corpus tasks, then inject flaws in rounds of
# growing attempts per recorded run, every framework advancing together. Resumable: rerun
# it and it continues where it stopped (each framework's folder under runs/ is its
# `faultfinder inject run --out`). After each round the kept failures are copied to
# data/corpus/injected/<framework>.jsonl, the dataset the benchmarks read.
#
# Needs the agents' tool-calling model endpoint, e.g.
#   .venv/bin/faultfinder llm serve --model qwen1.5b --runtime llama-server --port 8080
# and each framework's environment (.venv/bin/nox -s conformance --install-only builds them).
#
#   bash data/corpus/generate.sh                         # everything, in rounds
#   FRAMEWORKS="langgraph pydantic-ai" ROUNDS="2" bash data/corpus/generate.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
UPSTREAM=${UPSTREAM:-http://127.0.0.1:8080/v1}
FRAMEWORKS=${FRAMEWORKS:-"langgraph openai-agents pydantic-ai"}
ROUNDS=${ROUNDS:-"2 4 6 8"}
TIMEOUT=${TIMEOUT:-600}
corpus=data/corpus
mkdir -p "$corpus/runs" "$corpus/injected"

program() {
  local framework=$1
  local python=".nox/conformance-framework-$framework/bin/python"
  if [ ! -x "$python" ]; then
    echo "generate.sh: no environment for $framework ($python); build it with" \
      ".venv/bin/nox -s \"conformance(framework='$framework')\" --install-only" >&2
    return 1
  fi
  echo "$python $corpus/programs/${framework//-/_}_team.py"
}

inject() {
  local framework=$1
  shift
  .venv/bin/faultfinder inject run --program "$(program "$framework")" \
    --tasks "$corpus/tasks.jsonl" --framework "$framework" --out "$corpus/runs/$framework" \
    --upstream "$UPSTREAM" --timeout "$TIMEOUT" "$@" > "$corpus/runs/$framework.summary.json"
  if [ -f "$corpus/runs/$framework/injected.jsonl" ]; then
    cp "$corpus/runs/$framework/injected.jsonl" "$corpus/injected/$framework.jsonl"
  fi
}

for framework in $FRAMEWORKS; do
  echo "== recording $framework" >&2
  inject "$framework" --record-only
done
for attempts in $ROUNDS; do
  for framework in $FRAMEWORKS; do
    echo "== injecting $framework, up to $attempts attempts per recorded run" >&2
    inject "$framework" --attempts-per-run "$attempts"
  done
done
