#!/usr/bin/env bash
# The LLM attributors on a fixed sample of the injected corpus (issue 25, Deliver 5):
# all_at_once, a2p and the learned->LLM hybrid (all_at_once shown the learned model's top 3
# steps as hints, `--prefilter 3`) on the local Qwen2.5-Coder-1.5B model,
# beside the zero-LLM default on the same records. Reports in reports/corpus-llm/.
#
# The sample: up to PER_MODE records of each error mode, spread over the frameworks, drawn
# with a fixed seed (data/corpus/llm-sample.txt, rewritten only when absent).
# Needs a model endpoint, e.g.
#   .venv/bin/faultfinder llm serve --model qwen1.5b --runtime llama-server --port 8090
# Long CPU work (about a minute per LLM attribution on 2 shared cores); resumable: rerun to
# continue (each method's --out keeps its results).
set -euo pipefail
cd "$(dirname "$0")/../.."
BASE_URL=${BASE_URL:-http://127.0.0.1:8090/v1}
PER_MODE=${PER_MODE:-3}
METHODS=${METHODS:-"learned all_at_once all_at_once+hints a2p"}
corpus=data/corpus/injected
sample=data/corpus/llm-sample.txt
reports=reports/corpus-llm
if [ ! -f "$sample" ]; then
  .venv/bin/python - "$corpus" "$PER_MODE" > "$sample" <<'PY'
import json, random, sys
from collections import defaultdict
from pathlib import Path
by_mode = defaultdict(lambda: defaultdict(list))
for path in sorted(Path(sys.argv[1]).glob("*.jsonl")):
    for line in path.read_text().splitlines():
        record = json.loads(line)
        by_mode[record["label"]["mode"]][record["framework"]].append(record["id"])
rng = random.Random(20261203)
print(f"# The fixed LLM sample of the injected corpus: up to {sys.argv[2]} records per error")
print("# mode, round-robin over frameworks, seed 20261203 (data/corpus/evaluate_llm.sh).")
for mode in sorted(by_mode):
    pools = {fw: rng.sample(ids, len(ids)) for fw, ids in sorted(by_mode[mode].items())}
    chosen = []
    while len(chosen) < int(sys.argv[2]) and any(pools.values()):
        for fw in sorted(pools):
            if pools[fw] and len(chosen) < int(sys.argv[2]):
                chosen.append(pools[fw].pop())
    for record_id in chosen:
        print(record_id)
PY
fi
# The packaged model was trained on this corpus: the zero-LLM baseline and the hybrid's
# hints come from a model trained on Who&When alone, so no record is scored in-sample.
model=$reports/who-and-when-only-model.json
if [ ! -f "$model" ]; then
  .venv/bin/faultfinder train --dataset who_and_when --out "$model" > /dev/null
fi
for method in $METHODS; do
  echo "== $method on the sample ($(grep -vc '^#' "$sample") records)" >&2
  options=(--learned-model "$model")
  attributor=${method%+hints}
  if [ "$method" != learned ]; then
    options+=(--base-url "$BASE_URL" --model local --concurrency 1)
  fi
  if [ "$method" != "$attributor" ]; then
    options+=(--prefilter 3)
  elif [ "$method" != learned ]; then
    options=("${options[@]:2}")  # no hints: the model file has no use
  fi
  .venv/bin/faultfinder bench run --dataset "$corpus" --attributor "$attributor" \
    --records "$sample" "${options[@]}" --out "$reports/$method"
done
echo "reports in $reports/" >&2
