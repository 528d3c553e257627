#!/usr/bin/env bash
# Score the labelled conversations (benchmarks/conversations/DATASHEET.md) two-fold by
# τ-bench task id: each half scored by a model trained on Who&When, the injection corpus
# and the other half (no task in both), beside first_error, random and the model trained
# on no conversation at all; and each half once more in the folded layout (no system step,
# tool replies folded into their calls; `tau_bench.folded`) and as Who&When-format files
# (calls and tools named only in the text; `tau_bench.who_and_when_layout`), scored by the
# same model. Writes benchmarks/reports/conversations/<half>[-folded|-who-and-when]/<method>/.
# Zero-LLM only; about 6 minutes on 2 cores.
#
#   bash benchmarks/conversations/evaluate.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
set_=benchmarks/conversations/tau-bench-airline.jsonl
reports=benchmarks/reports/conversations
ff=${FF:-.venv/bin/faultfinder}
python=${PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" - "$set_" "$work" <<'PY'
import json, sys
source, work = sys.argv[1], sys.argv[2]
for half in ("even", "odd"):
    with open(f"{work}/{half}.jsonl", "w", encoding="utf-8") as out:
        for line in open(source, encoding="utf-8"):
            if json.loads(line)["subset"].endswith(f"/{half}-tasks"):
                out.write(line)
PY
echo "== a model with no conversation in its training" >&2
$ff train --dataset who_and_when,benchmarks/corpus/injected --out "$work/none.json" > /dev/null
for half in even odd; do
  other=$([ "$half" = even ] && echo odd || echo even)
  echo "== $half half: training on the $other half" >&2
  $ff train --dataset "who_and_when,benchmarks/corpus/injected,$work/$other.jsonl" \
    --out "$work/$other.json" > /dev/null
  $ff bench run --dataset "$work/$half.jsonl" --attributor learned --learned-model \
    "$work/$other.json" --without-ground-truth --out "$reports/$half/learned" --no-resume > /dev/null
  $ff bench run --dataset "$work/$half.jsonl" --attributor learned --learned-model \
    "$work/none.json" --without-ground-truth --out "$reports/$half/learned-no-conversations" \
    --no-resume > /dev/null
  for attributor in first_error random; do
    $ff bench run --dataset "$work/$half.jsonl" --attributor "$attributor" \
      --without-ground-truth --out "$reports/$half/$attributor" --no-resume > /dev/null
  done
  "$python" -m faultfinder.benchmarks.datasets.tau_bench --folded "$work/$half.jsonl" \
    --out "$work/$half-folded.jsonl" > /dev/null
  $ff bench run --dataset "$work/$half-folded.jsonl" --attributor learned --learned-model \
    "$work/$other.json" --without-ground-truth --out "$reports/$half-folded/learned" \
    --no-resume > /dev/null
  $ff bench run --dataset "$work/$half-folded.jsonl" --attributor first_error \
    --without-ground-truth --out "$reports/$half-folded/first_error" --no-resume > /dev/null
  "$python" -m faultfinder.benchmarks.datasets.tau_bench --who-and-when "$work/$half.jsonl" \
    --out "$work/$half-who-and-when" > /dev/null
  $ff bench run --dataset "$work/$half-who-and-when" --attributor learned --learned-model \
    "$work/$other.json" --without-ground-truth --out "$reports/$half-who-and-when/learned" \
    --no-resume > /dev/null
  $ff bench run --dataset "$work/$half-who-and-when" --attributor first_error \
    --without-ground-truth --out "$reports/$half-who-and-when/first_error" --no-resume > /dev/null
done
echo "reports in $reports/{even,odd}/{learned,learned-no-conversations,first_error,random}" \
  "and $reports/{even,odd}-{folded,who-and-when}/{learned,first_error}" >&2
