"""The table of reports/corpus-llm.md: each method's results on the fixed LLM
sample (data/corpus/evaluate_llm.sh), overall and per error mode, with tokens.

    .venv/bin/python data/corpus/llm_table.py > reports/corpus-llm/table.md
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

REPORTS = Path(__file__).resolve().parents[1] / "reports" / "corpus-llm"
METHODS = ("learned", "all_at_once", "all_at_once+hints", "a2p")


def _results(method: str) -> list[dict[str, Any]]:
    path = REPORTS / method / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _cell(rows: list[dict[str, Any]], key: str) -> str:
    hits = sum(bool(row["score"][key]) for row in rows)
    return f"{hits}/{len(rows)}"


def main() -> None:
    done = {method: _results(method) for method in METHODS}
    done = {method: rows for method, rows in done.items() if rows}
    print("| method | records | agent | step | step ±1 | tokens / attribution (median) |")
    print("|---|---:|---:|---:|---:|---:|")
    for method, rows in done.items():
        tokens = [int(r["prompt_tokens"]) + int(r["completion_tokens"]) for r in rows]
        print(
            f"| {method} | {len(rows)} | {_cell(rows, 'agent')} | {_cell(rows, 'step')} | "
            f"{_cell(rows, 'step_pm1')} | {statistics.median(tokens):.0f} |"
        )
    print()
    print("Steps right per error mode (agent in brackets):")
    print()
    print("| mode | n | " + " | ".join(done) + " |")
    print("|---|---:|" + "---:|" * len(done))
    modes: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for method, rows in done.items():
        for row in rows:
            modes[row["gold"]["mode"]][method].append(row)
    for mode in sorted(modes):
        n = max(len(rows) for rows in modes[mode].values())
        cells = [
            f"{_cell(modes[mode][m], 'step')} ({_cell(modes[mode][m], 'agent')})"
            if modes[mode][m]
            else "—"
            for m in done
        ]
        print(f"| {mode} | {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
