#!/usr/bin/env bash
# The labelled conversations (DATASHEET.md) as the sidecar receives them live, through one
# agent framework and its own instrumentation: FRAMEWORK=openai-agents (the default; the
# OpenAI Agents SDK traced by openinference-instrumentation-openai-agents), pydantic-ai
# (traced by its own instrumentation) or langgraph (`create_react_agent`, traced by
# openinference-instrumentation-langchain). Each recorded conversation is replayed into a real
# `faultfinder serve` (data/corpus/programs/<framework>_chat_replay.py; the model is a
# scripted OpenAI-compatible server serving the recorded messages, not a model). The
# people's labels move to the live steps (`faultfinder.datasets.tau_bench_live`)
# and are posted with `POST /api/runs/{id}/labels`; the labelled runs are exported with
# `faultfinder dataset export` as tau-bench-airline-live.jsonl (openai-agents; evaluate.sh
# scores it and the shipped model is trained on it) or
# tau-bench-airline-live-<framework>.jsonl (scored only, never trained on). About 2
# minutes on 2 cores; needs the framework's environment
# (.venv/bin/nox -s "conformance(framework='openai-agents')" --install-only).
#
#   bash data/conversations/replay_live.sh
#   FRAMEWORK=pydantic-ai bash data/conversations/replay_live.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
framework=${FRAMEWORK:-openai-agents}
case "$framework" in
  openai-agents)
    live=data/conversations/tau-bench-airline-live.jsonl
    suffix=live
    ;;
  pydantic-ai | langgraph)
    live=data/conversations/tau-bench-airline-live-$framework.jsonl
    suffix=live-$framework
    ;;
  *)
    echo "replay_live.sh: FRAMEWORK is openai-agents, pydantic-ai or langgraph, not" \
      "$framework" >&2
    exit 2
    ;;
esac
set_=data/conversations/tau-bench-airline.jsonl
ff=${FF:-.venv/bin/faultfinder}
python=${PYTHON:-.venv/bin/python}
framework_python=.nox/conformance-framework-$framework/bin/python
work=$(mktemp -d)
serve_pid=
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if [ ! -x "$framework_python" ]; then
  echo "replay_live.sh: no $framework environment; build it with" \
    ".venv/bin/nox -s \"conformance(framework='$framework')\" --install-only" >&2
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
echo "== replaying the conversations through $framework" >&2
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://127.0.0.1:$port/v1/traces" \
  "$framework_python" "data/corpus/programs/${framework//-/_}_chat_replay.py" "$set_" \
  > "$work/replayed.jsonl"
echo "== carrying the labels over" >&2
"$python" -m faultfinder.datasets.tau_bench_live label "$set_" \
  "$work/replayed.jsonl" --sidecar "http://127.0.0.1:$port"
kill "$serve_pid"
wait "$serve_pid" || true
serve_pid=
"$ff" dataset export --database "$database" --out "$work/exported.jsonl"
"$python" -m faultfinder.datasets.tau_bench_live name "$work/exported.jsonl" \
  "$set_" --out "$live" --suffix "$suffix"
