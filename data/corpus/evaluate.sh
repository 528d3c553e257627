#!/usr/bin/env bash
# Score the injected corpus (data/corpus/DATASHEET.md) and write the reports the
# issue tracker and reports/transfer.md quote:
#   reports/transfer/          leave-one-framework-out per framework and mode
#                                         (learned vs the Who&When-only model, first_error,
#                                         random), summary.json + report.md
#   reports/corpus-baselines/  random and first_error over the whole corpus
#   reports/ww-cv-with-corpus/ Who&When task-grouped CV, every fold also
#                                         trained on the corpus
#   reports/transfer-with-conversations/
#                                         the same leave-one-framework-out with the
#                                         labelled τ-bench conversations as a fourth one
# Zero-LLM only; a few minutes each on 2 cores (SEEDS=1 for a quick look).
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=${SEEDS:-3}
corpus=data/corpus/injected
reports=reports
ff=.venv/bin/faultfinder
echo "== leave-one-framework-out on $corpus ($SEEDS seeds)" >&2
$ff bench transfer --dataset "$corpus" --train-also who_and_when --cv-seeds "$SEEDS" \
  --out "$reports/transfer"
for attributor in random first_error; do
  echo "== $attributor on the whole corpus" >&2
  $ff bench run --dataset "$corpus" --attributor "$attributor" \
    --out "$reports/corpus-baselines/$attributor" --no-resume > /dev/null
done
echo "== Who&When task-grouped CV, folds also trained on the corpus" >&2
$ff bench run --dataset who_and_when --attributor learned --cv 5 --cv-seeds "$SEEDS" \
  --train-also "$corpus" --out "$reports/ww-cv-with-corpus" --no-resume > /dev/null
echo "== leave-one-framework-out with the conversations ($SEEDS seeds)" >&2
$ff bench transfer --dataset "$corpus,data/conversations/tau-bench-airline.jsonl" \
  --train-also who_and_when --cv-seeds "$SEEDS" --out "$reports/transfer-with-conversations"
echo "reports in $reports/{transfer,corpus-baselines,ww-cv-with-corpus,transfer-with-conversations}" >&2
