#!/usr/bin/env bash
# Static checks from the checkout: mypy strict over every part and the tests, then the
# import layers ([tool.importlinter] in pyproject.toml). The folders are the import paths,
# so both read the checkout's files as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== mypy (strict, every part and the tests)" >&2
.venv/bin/mypy -p faultfinder -p tests
# The corpus's agent programs, outside the package (each imports its siblings by name).
.venv/bin/mypy data/corpus/programs
echo "== import layers" >&2
.venv/bin/lint-imports --no-cache
echo "== module sizes (at most 500 lines each)" >&2
over=$(find faultfinder tests data/corpus/programs scripts noxfile.py -name '*.py' -print0 \
  | xargs -0 wc -l | awk '$1 > 500 && $2 != "total" {print $2 " (" $1 " lines)"}')
if [ -n "$over" ]; then
  echo "modules over 500 lines, split them:" >&2
  echo "$over" >&2
  exit 1
fi
