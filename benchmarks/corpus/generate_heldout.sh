#!/usr/bin/env bash
# Generate the held-out shop set (benchmarks/corpus/DATASHEET.md, "Held out"): a framework
# and a domain the corpus does not have (LlamaIndex; an online shop's JSON tools), made the
# same way as the corpus and never trained on. Resumable, like generate.sh: rerun it to
# continue (more rounds: ROUNDS="4 6"). Kept failures are copied to
# benchmarks/corpus/heldout/llamaindex-shop.jsonl after each round.
#
#   .venv/bin/faultfinder llm serve --model qwen1.5b --runtime llama-server --port 8090 &
#   UPSTREAM=http://127.0.0.1:8090/v1 bash benchmarks/corpus/generate_heldout.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
UPSTREAM=${UPSTREAM:-http://127.0.0.1:8080/v1}
ROUNDS=${ROUNDS:-"2"}
TIMEOUT=${TIMEOUT:-400}
corpus=benchmarks/corpus
python=.nox/conformance-framework-llamaindex/bin/python
if [ ! -x "$python" ]; then
  echo "generate_heldout.sh: build the environment first:" \
    ".venv/bin/nox -s \"conformance(framework='llamaindex')\" --install-only" >&2
  exit 1
fi
mkdir -p "$corpus/runs" "$corpus/heldout"
inject() {
  .venv/bin/faultfinder inject run --program "$python $corpus/programs/llamaindex_shop.py" \
    --tasks "$corpus/shop_tasks.jsonl" --framework llamaindex \
    --out "$corpus/runs/llamaindex-shop" --upstream "$UPSTREAM" --timeout "$TIMEOUT" "$@" \
    > "$corpus/runs/llamaindex-shop.summary.json"
  if [ -f "$corpus/runs/llamaindex-shop/injected.jsonl" ]; then
    cp "$corpus/runs/llamaindex-shop/injected.jsonl" "$corpus/heldout/llamaindex-shop.jsonl"
  fi
}
echo "== recording the shop desk (llamaindex)" >&2
inject --record-only
for attempts in $ROUNDS; do
  echo "== injecting, up to $attempts attempts per recorded run" >&2
  inject --attempts-per-run "$attempts"
done
