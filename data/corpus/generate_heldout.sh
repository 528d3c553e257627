#!/usr/bin/env bash
# Generate a held-out shop set (data/corpus/DATASHEET.md, "Held out"): a framework
# and a domain the corpus does not have (LlamaIndex, AutoGen AgentChat or Google ADK; an
# online shop's JSON tools), made the same way as the corpus and never trained on. PROGRAM
# picks the program: llamaindex_shop (the default: a Clerk that may hand off to a
# Cashier), llamaindex_desk (a Clerk's note, then the Cashier's answer, in every run),
# autogen_desk (the same two agents in an AutoGen round-robin group chat) or adk_desk (the
# same two in a Google ADK SequentialAgent); the framework's environment is the one the
# program's name begins with. Resumable, like generate.sh: rerun it to
# continue (more rounds: ROUNDS="4 6"). Kept failures are copied to
# data/corpus/heldout/<program, with a dash>.jsonl after each round.
#
#   .venv/bin/faultfinder llm serve --model qwen1.5b --runtime llama-server --port 8090 &
#   UPSTREAM=http://127.0.0.1:8090/v1 bash data/corpus/generate_heldout.sh
#   PROGRAM=llamaindex_desk UPSTREAM=http://127.0.0.1:8090/v1 bash data/corpus/generate_heldout.sh
#   PROGRAM=autogen_desk UPSTREAM=http://127.0.0.1:8090/v1 bash data/corpus/generate_heldout.sh
#   PROGRAM=adk_desk UPSTREAM=http://127.0.0.1:8090/v1 ROUNDS="2 4 6 8" bash data/corpus/generate_heldout.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
UPSTREAM=${UPSTREAM:-http://127.0.0.1:8080/v1}
ROUNDS=${ROUNDS:-"2"}
TIMEOUT=${TIMEOUT:-400}
PROGRAM=${PROGRAM:-llamaindex_shop}
name=${PROGRAM//_/-}
case "$PROGRAM" in
  llamaindex_*) framework=llamaindex ;;
  autogen_*) framework=autogen-agentchat ;;
  adk_*) framework=google-adk ;;
  *) echo "generate_heldout.sh: no framework known for PROGRAM=$PROGRAM" >&2; exit 2 ;;
esac
corpus=data/corpus
python=.nox/conformance-framework-$framework/bin/python
if [ ! -x "$python" ]; then
  echo "generate_heldout.sh: build the environment first:" \
    ".venv/bin/nox -s \"conformance(framework='$framework')\" --install-only" >&2
  exit 1
fi
mkdir -p "$corpus/runs" "$corpus/heldout"
inject() {
  .venv/bin/faultfinder inject run --program "$python $corpus/programs/$PROGRAM.py" \
    --tasks "$corpus/shop_tasks.jsonl" --framework "$framework" \
    --out "$corpus/runs/$name" --upstream "$UPSTREAM" --timeout "$TIMEOUT" "$@" \
    > "$corpus/runs/$name.summary.json"
  if [ -f "$corpus/runs/$name/injected.jsonl" ]; then
    cp "$corpus/runs/$name/injected.jsonl" "$corpus/heldout/$name.jsonl"
  fi
}
echo "== recording $PROGRAM ($framework)" >&2
inject --record-only
for attempts in $ROUNDS; do
  echo "== injecting, up to $attempts attempts per recorded run" >&2
  inject --attempts-per-run "$attempts"
done
