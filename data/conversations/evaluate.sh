#!/usr/bin/env bash
# Score the labelled conversations (data/conversations/DATASHEET.md) two-fold by
# τ-bench task id: each half scored by a model trained on Who&When, the injection corpus
# and the other half (no task in both), the other half both as recorded and as the sidecar
# received it live (tau-bench-airline-live.jsonl, made by replay_live.sh), as the shipped
# model is trained; beside first_error, random, the model trained on no conversation at all
# and the one trained on the recorded half only. Each half is scored in six layouts: as
# recorded; live through the OpenAI Agents SDK; live through pydantic-ai and through
# LangGraph (never trained on; tau-bench-airline-live-<framework>.jsonl); folded (no system step, tool replies
# folded into their calls; `tau_bench.folded`); and as Who&When-format files (calls and
# tools named only in the text; `tau_bench.who_and_when_layout`). Writes
# reports/conversations/<half>[-live[-pydantic-ai|-langgraph]|-folded|
# -who-and-when]/<method>/. Zero-LLM only; about 12 minutes on 2 cores.
#
#   bash data/conversations/evaluate.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
set_=data/conversations/tau-bench-airline.jsonl
live=data/conversations/tau-bench-airline-live.jsonl
pydantic=data/conversations/tau-bench-airline-live-pydantic-ai.jsonl
langgraph=data/conversations/tau-bench-airline-live-langgraph.jsonl
reports=reports/conversations
ff=${FF:-.venv/bin/faultfinder}
python=${PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" - "$set_" "$live" "$pydantic" "$langgraph" "$work" <<'PY'
import json, sys
recorded, live, pydantic, langgraph, work = sys.argv[1:]
sets = (("", recorded), ("-live", live), ("-live-pydantic-ai", pydantic),
        ("-live-langgraph", langgraph))
for name, source in sets:
    for half in ("even", "odd"):
        with open(f"{work}/{half}{name}.jsonl", "w", encoding="utf-8") as out:
            for line in open(source, encoding="utf-8"):
                if json.loads(line)["subset"].endswith(f"/{half}-tasks"):
                    out.write(line)
PY
score() {  # score DATASET OUT ATTRIBUTOR [MODEL]
  $ff bench run --dataset "$1" --attributor "$3" ${4:+--learned-model "$4"} \
    --without-ground-truth --out "$reports/$2" --no-resume > /dev/null
}
echo "== a model with no conversation in its training" >&2
$ff train --dataset who_and_when,data/corpus/injected --out "$work/none.json" > /dev/null
for half in even odd; do
  other=$([ "$half" = even ] && echo odd || echo even)
  echo "== $half half: training on the $other half" >&2
  $ff train --dataset "who_and_when,data/corpus/injected,$work/$other.jsonl,$work/$other-live.jsonl" \
    --out "$work/$other.json" > /dev/null
  $ff train --dataset "who_and_when,data/corpus/injected,$work/$other.jsonl" \
    --out "$work/$other-recorded.json" > /dev/null
  "$python" -m faultfinder.datasets.tau_bench --folded "$work/$half.jsonl" \
    --out "$work/$half-folded.jsonl" > /dev/null
  "$python" -m faultfinder.datasets.tau_bench --who-and-when "$work/$half.jsonl" \
    --out "$work/$half-who-and-when" > /dev/null
  score "$work/$half.jsonl" "$half/learned-no-conversations" learned "$work/none.json"
  score "$work/$half.jsonl" "$half/random" random
  for layout in "" -live -live-pydantic-ai -live-langgraph -folded -who-and-when; do
    data="$work/$half$layout"
    [ "$layout" = -who-and-when ] || data="$data.jsonl"
    score "$data" "$half$layout/learned" learned "$work/$other.json"
    score "$data" "$half$layout/learned-recorded-only" learned "$work/$other-recorded.json"
    score "$data" "$half$layout/first_error" first_error
  done
done
echo "reports in $reports/{even,odd}[-live[-pydantic-ai|-langgraph]|-folded|-who-and-when]/" \
  "<method>" >&2
