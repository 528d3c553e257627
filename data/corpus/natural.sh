#!/usr/bin/env bash
# Natural failures of the corpus programs, labelled by counterfactual replay
# (data/corpus/natural/README.md). For each framework's team program: run the tasks once
# each, keeping the model calls of every run that failed by itself
# (`faultfinder inject run --record-only`, OUT/natural-recordings/); search each kept
# failure for the earliest model-made step whose correction makes the run succeed
# (`faultfinder verify --search earliest`, OUT/verify/<task>/) against a sidecar on the
# run's own database; then gather the labelled ones into data/corpus/natural/<fw>.jsonl
# and print the yields (`faultfinder inject natural-collect`, also in runs/<fw>.yields.json).
#
# Resumable: rerun it and it continues where it stopped (tasks already run are skipped,
# a finished search is not started again, a search cut short goes on from the step it
# was on). LIMITS runs in rounds of growing task counts per framework, every framework
# advancing together, so labels come early; LIMIT alone is one round.
#
# Needs the agents' tool-calling model endpoint, e.g.
#   .venv/bin/faultfinder llm serve --model qwen1.5b --runtime llama-server --port 8080
# and each framework's environment (.venv/bin/nox -s conformance --install-only builds them).
#
#   bash data/corpus/natural.sh                                  # every task, all frameworks
#   FRAMEWORKS="pydantic-ai" LIMITS="4 16 48" bash data/corpus/natural.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
UPSTREAM=${UPSTREAM:-http://127.0.0.1:8080/v1}
FRAMEWORKS=${FRAMEWORKS:-"langgraph pydantic-ai openai-agents"}
TASKS=${TASKS:-data/corpus/tasks.jsonl}
LIMIT=${LIMIT:-}
LIMITS=${LIMITS:-$LIMIT}
TIMEOUT=${TIMEOUT:-600}
NATURAL=${NATURAL:-data/corpus/natural}
FAULTFINDER=${FAULTFINDER:-.venv/bin/faultfinder}
PROGRAM=${PROGRAM:-}  # one program for every framework (default: the framework's team)
PYTHON=$(dirname "$FAULTFINDER")/python
runs=$NATURAL/runs
mkdir -p "$runs"

say() { echo "natural.sh $(date -u +%H:%M:%S): $*" >&2; }

program() {
  local framework=$1
  if [ -n "$PROGRAM" ]; then
    echo "$PROGRAM"
    return
  fi
  local python=".nox/conformance-framework-$framework/bin/python"
  if [ ! -x "$python" ]; then
    echo "natural.sh: no environment for $framework ($python); build it with" \
      ".venv/bin/nox -s \"conformance(framework='$framework')\" --install-only" >&2
    return 1
  fi
  echo "$python data/corpus/programs/${framework//-/_}_team.py"
}

# shellcheck source=data/corpus/sidecar.sh
source data/corpus/sidecar.sh  # the working folder is the checkout's root (above)

record() {
  local framework=$1 limit=$2
  say "recording $framework${limit:+ (first $limit tasks)}"
  "$FAULTFINDER" inject run --program "$(program "$framework")" --tasks "$TASKS" \
    --framework "$framework" --out "$runs/$framework" --upstream "$UPSTREAM" \
    --timeout "$TIMEOUT" --record-only ${limit:+--limit "$limit"} > "$runs/$framework.summary.json"
}

verify_one() {
  local framework=$1 recording=$2
  local name out task_id run_id outcome
  name=$(basename "$recording" .json)
  out=$runs/$framework/verify/$name
  read -r task_id run_id outcome < <("$PYTHON" -c 'import json, sys
info = json.load(open(sys.argv[1]))["info"]
print(info["task_id"], info["run_id"], info["outcome"])' "$recording")
  mkdir -p "$out"
  # The task exactly as the program read it on stdin.
  "$PYTHON" -c 'import sys
from pathlib import Path
from faultfinder.injection.files import read_tasks
(task,) = [t.task for t in read_tasks(Path(sys.argv[1])) if t.id == sys.argv[2]]
Path(sys.argv[3]).write_text(task)' "$TASKS" "$task_id" "$out/task.txt"
  say "verifying $framework $task_id ($outcome, run $run_id)"
  if ! "$FAULTFINDER" verify --program "$(program "$framework")" --recording "$recording" \
    --run "$run_id" --sidecar "$sidecar_url" --upstream "$UPSTREAM" --task-file "$out/task.txt" \
    --search earliest --timeout "$TIMEOUT" --out "$out" > "$out/summary.json"; then
    say "verifying $framework $task_id failed; it is tried again on the next run"
  fi
}

verify_and_collect() {
  local framework=$1 out=$runs/$1 recording
  [ -d "$out" ] || return 0
  start_sidecar "$out"
  for recording in "$out"/natural-recordings/*.json; do
    [ -e "$recording" ] || continue
    [ -e "$out/verify/$(basename "$recording" .json)/verification.json" ] && continue
    verify_one "$framework" "$recording"
  done
  "$FAULTFINDER" inject natural-collect --out "$out" --framework "$framework" \
    --dataset "$NATURAL/$framework.jsonl" > "$runs/$framework.yields.json"
  stop_sidecar
}

for limit in ${LIMITS:-all}; do
  [ "$limit" = all ] && limit=""
  for framework in $FRAMEWORKS; do
    record "$framework" "$limit" || say "recording $framework stopped with an error"
    verify_and_collect "$framework"
  done
done
say "done"
