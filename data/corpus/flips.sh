#!/usr/bin/env bash
# The injection pipeline's own check (issue 57): does correcting the injected step make an
# injected failure succeed again? For each framework's team program, injection attempts
# are made again on the recorded successful runs of the injected corpus (data/corpus/runs/
# <fw>/originals.jsonl and recordings/, copied, never changed), this time keeping each
# kept failure's model calls (OUT/injected-recordings/); then `faultfinder verify` replays
# each kept failure with its labelled step corrected by the model (the same corrector a
# user's verification uses: it is told the task and the right answer, not the original
# text) and records whether the run then succeeds. `faultfinder inject flip-rate` counts.
#
# Resumable: attempts already made are skipped by `inject run`, a kept failure with a
# verification.json is not verified again. Runs in rounds of growing attempts per recorded
# run, every framework advancing together, so a rate comes early.
#
# Needs the agents' tool-calling model endpoint, e.g.
#   .venv/bin/faultfinder llm serve --model qwen1.5b --runtime llama-server --port 8080
# and each framework's environment (.venv/bin/nox -s conformance --install-only builds them).
#
#   bash data/corpus/flips.sh
#   FRAMEWORKS="pydantic-ai" ROUNDS="1 2" bash data/corpus/flips.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
UPSTREAM=${UPSTREAM:-http://127.0.0.1:8080/v1}
FRAMEWORKS=${FRAMEWORKS:-"langgraph pydantic-ai openai-agents"}
ROUNDS=${ROUNDS:-"1 2 3"}
TIMEOUT=${TIMEOUT:-600}
FLIPS=${FLIPS:-data/corpus/flips}
FAULTFINDER=${FAULTFINDER:-.venv/bin/faultfinder}
PYTHON=$(dirname "$FAULTFINDER")/python
corpus=data/corpus
runs=$FLIPS/runs
mkdir -p "$runs"

say() { echo "flips.sh $(date -u +%H:%M:%S): $*" >&2; }

program() {
  local framework=$1
  local python=".nox/conformance-framework-$framework/bin/python"
  if [ ! -x "$python" ]; then
    echo "flips.sh: no environment for $framework ($python); build it with" \
      ".venv/bin/nox -s \"conformance(framework='$framework')\" --install-only" >&2
    return 1
  fi
  echo "$python $corpus/programs/${framework//-/_}_team.py"
}

# shellcheck source=data/corpus/sidecar.sh
source data/corpus/sidecar.sh  # the working folder is the checkout's root (above)

inject() {
  local framework=$1 attempts=$2 out=$runs/$1
  if [ ! -e "$out/originals.jsonl" ]; then
    mkdir -p "$out"
    cp "$corpus/runs/$framework/originals.jsonl" "$out/"
    cp -r "$corpus/runs/$framework/recordings" "$out/"
  fi
  say "injecting $framework, up to $attempts attempts per recorded run"
  "$FAULTFINDER" inject run --program "$(program "$framework")" --tasks "$corpus/tasks.jsonl" \
    --framework "$framework" --out "$out" --upstream "$UPSTREAM" --timeout "$TIMEOUT" \
    --attempts-per-run "$attempts" > "$runs/$framework.summary.json"
}

verify_one() {
  local framework=$1 recording=$2
  local name out task_id run_id step
  name=$(basename "$recording" .json)
  out=$runs/$framework/verify/$name
  read -r task_id run_id step < <("$PYTHON" -c 'import json, sys
info = json.load(open(sys.argv[1]))["info"]
print(info["task_id"], info["run_id"], info["label_step"])' "$recording")
  mkdir -p "$out"
  "$PYTHON" -c 'import sys
from pathlib import Path
from faultfinder.injection.files import read_tasks
(task,) = [t.task for t in read_tasks(Path(sys.argv[1])) if t.id == sys.argv[2]]
Path(sys.argv[3]).write_text(task)' "$corpus/tasks.jsonl" "$task_id" "$out/task.txt"
  say "verifying $framework $name (step $step, run $run_id)"
  if ! "$FAULTFINDER" verify --program "$(program "$framework")" --recording "$recording" \
    --run "$run_id" --sidecar "$sidecar_url" --upstream "$UPSTREAM" --task-file "$out/task.txt" \
    --step "$step" --timeout "$TIMEOUT" --out "$out" > "$out/summary.json"; then
    say "verifying $framework $name failed; it is tried again on the next run"
  fi
}

verify_all() {
  local framework=$1 out=$runs/$1 recording
  [ -d "$out/injected-recordings" ] || return 0
  start_sidecar "$out"
  for recording in "$out"/injected-recordings/*.json; do
    [ -e "$recording" ] || continue
    [ -e "$out/verify/$(basename "$recording" .json)/verification.json" ] && continue
    verify_one "$framework" "$recording"
  done
  stop_sidecar
  "$FAULTFINDER" inject flip-rate --out "$out" > "$runs/$framework.flips.json"
}

for attempts in $ROUNDS; do
  for framework in $FRAMEWORKS; do
    inject "$framework" "$attempts" || say "injecting $framework stopped with an error"
    verify_all "$framework"
  done
done
say "done"
