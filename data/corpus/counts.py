"""The corpus's counts, written into DATASHEET.md between its markers.

    .venv/bin/python data/corpus/counts.py          # rewrite the counts section
    .venv/bin/python data/corpus/counts.py --check  # exit 1 when it is stale

Reads each framework's `runs/<framework>/originals.jsonl` and `attempts.jsonl` (what
`faultfinder inject run` appended) and `injected/<framework>.jsonl` (the kept failures).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
START = "<!-- corpus-counts:start (python data/corpus/counts.py) -->"
END = "<!-- corpus-counts:end -->"
COLUMNS = ("attempts", "diverged", "recovered", "kept", "unmapped")


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def counts(root: Path = HERE) -> str:
    frameworks = sorted(p.name for p in (root / "runs").iterdir() if p.is_dir())
    lines = ["### Recorded runs", "", "| framework | tasks run | succeeded | wrong | crashed |",
             "|---|---:|---:|---:|---:|"]  # fmt: skip
    cells: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    modes: set[str] = set()
    replayed = matched = 0
    for framework in frameworks:
        originals = Counter(
            o["outcome"] for o in _lines(root / "runs" / framework / "originals.jsonl")
        )
        lines.append(
            f"| {framework} | {sum(originals.values())} | {originals['success']} |"
            f" {originals['wrong']} | {originals['crash']} |"
        )
        for attempt in _lines(root / "runs" / framework / "attempts.jsonl"):
            outcome = attempt["outcome"]
            if outcome in ("not_applicable", "error"):
                continue
            cell = cells[(framework, attempt["mode"])]
            modes.add(attempt["mode"])
            cell["attempts"] += 1
            cell[outcome] += 1
            if outcome != "no_run":
                replayed += 1
                matched += outcome != "diverged"
    lines += ["", "### Injection attempts (attempts / diverged / recovered / kept / unmapped)", ""]
    ordered = sorted(modes, key=lambda m: (m.split(".")[0], int(m.split(".")[1])))
    lines.append("| mode | " + " | ".join(frameworks) + " | all |")
    lines.append("|---|" + "---:|" * (len(frameworks) + 1))
    for mode in [*ordered, "all"]:
        row = []
        total: Counter[str] = Counter()
        for framework in frameworks:
            summed: Counter[str] = Counter()
            for (f, m), c in cells.items():
                if f == framework and (mode == "all" or m == mode):
                    summed.update(c)
            total.update(summed)
            row.append(" / ".join(str(summed[c]) for c in COLUMNS))
        row.append(" / ".join(str(total[c]) for c in COLUMNS))
        lines.append(f"| {'**all**' if mode == 'all' else mode} | " + " | ".join(row) + " |")
    kept = sum(len(_lines(p)) for p in sorted((root / "injected").glob("*.jsonl")))
    lines += [
        "",
        f"Kept labelled failures in `injected/`: **{kept}**. Replayed prefixes that matched"
        f" their recording exactly: {matched} of {replayed}.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    sheet = HERE / "DATASHEET.md"
    text = sheet.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    updated = f"{head}{START}\n{counts()}\n{END}{tail}"
    if args.check:
        return 0 if updated == text else 1
    sheet.write_text(updated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
