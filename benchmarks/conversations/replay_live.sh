#!/usr/bin/env bash
# The labelled conversations (DATASHEET.md) as the sidecar receives them live. Each recorded
# conversation is replayed through the OpenAI Agents SDK, traced by
# openinference-instrumentation-openai-agents, into a real `faultfinder serve`
# (benchmarks/corpus/programs/openai_agents_chat_replay.py; the model is a scripted
# OpenAI-compatible server serving the recorded messages, not a model). The people's labels
# move to the live steps (`faultfinder.benchmarks.datasets.tau_bench_live`) and are posted
# with `POST /api/runs/{id}/labels`; the labelled runs are exported with `faultfinder dataset
# export` as tau-bench-airline-live.jsonl, which evaluate.sh scores and the shipped model is
# trained on. About 2 minutes on 2 cores; needs the OpenAI Agents SDK's environment
# (.venv/bin/nox -s "conformance(framework='openai-agents')" --install-only).
#
#   bash benchmarks/conversations/replay_live.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
set_=benchmarks/conversations/tau-bench-airline.jsonl
live=benchmarks/conversations/tau-bench-airline-live.jsonl
ff=${FF:-.venv/bin/faultfinder}
python=${PYTHON:-.venv/bin/python}
agents_python=.nox/conformance-framework-openai-agents/bin/python
work=$(mktemp -d)
serve_pid=
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if [ ! -x "$agents_python" ]; then
  echo "replay_live.sh: no OpenAI Agents SDK environment; build it with" \
    ".venv/bin/nox -s \"conformance(framework='openai-agents')\" --install-only" >&2
  exit 1
fi
port=${PORT:-4391}
database="sqlite+aiosqlite:///$work/live.db"
"$ff" serve --port "$port" --no-grpc --database-url "$database" --quiet-period 2 \
  > "$work/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 120); do
  curl -fs "http://127.0.0.1:$port/readyz" > /dev/null 2>&1 && break
  sleep 0.5
done
echo "== replaying the conversations through the OpenAI Agents SDK" >&2
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://127.0.0.1:$port/v1/traces" \
  "$agents_python" benchmarks/corpus/programs/openai_agents_chat_replay.py "$set_" \
  > "$work/replayed.jsonl"
echo "== carrying the labels over" >&2
"$python" -m faultfinder.benchmarks.datasets.tau_bench_live label "$set_" \
  "$work/replayed.jsonl" --sidecar "http://127.0.0.1:$port"
kill "$serve_pid"
wait "$serve_pid" || true
serve_pid=
"$ff" dataset export --database "$database" --out "$work/exported.jsonl"
"$python" -m faultfinder.benchmarks.datasets.tau_bench_live name "$work/exported.jsonl" \
  "$set_" --out "$live"
