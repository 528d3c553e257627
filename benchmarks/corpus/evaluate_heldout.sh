#!/usr/bin/env bash
# Score the held-out shop set (benchmarks/corpus/heldout/, DATASHEET.md "Held out"): the
# shipped zero-LLM attributors, which never saw this framework, this domain or these runs,
# and the random baseline, ground truth given. Writes benchmarks/reports/heldout/<method>/.
# Zero-LLM only; seconds.
#
#   bash benchmarks/corpus/evaluate_heldout.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
heldout=benchmarks/corpus/heldout
reports=benchmarks/reports/heldout
ff=${FF:-.venv/bin/faultfinder}
for attributor in learned first_error random; do
  echo "== $attributor on $heldout" >&2
  $ff bench run --dataset "$heldout" --attributor "$attributor" \
    --out "$reports/$attributor" --no-resume > /dev/null
done
echo "reports in $reports/{learned,first_error,random}" >&2
