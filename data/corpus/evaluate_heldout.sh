#!/usr/bin/env bash
# Score the held-out shop sets (data/corpus/heldout/, DATASHEET.md "Held out"): the
# shipped zero-LLM attributors, which never saw this framework, this domain or these runs,
# and the random baseline, ground truth given. Each set on its own, then all together:
# writes reports/heldout/<method>/ (all sets) and
# reports/heldout/<set>/<method>/. Zero-LLM only; seconds.
#
#   bash data/corpus/evaluate_heldout.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
heldout=data/corpus/heldout
reports=reports/heldout
ff=${FF:-.venv/bin/faultfinder}
for attributor in learned first_error random; do
  for set in "$heldout"/*.jsonl; do
    name=$(basename "$set" .jsonl)
    echo "== $attributor on $set" >&2
    $ff bench run --dataset "$set" --attributor "$attributor" \
      --out "$reports/$name/$attributor" --no-resume > /dev/null
  done
  echo "== $attributor on $heldout" >&2
  $ff bench run --dataset "$heldout" --attributor "$attributor" \
    --out "$reports/$attributor" --no-resume > /dev/null
done
echo "reports in $reports/{learned,first_error,random} and $reports/<set>/" >&2
