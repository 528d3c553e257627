"""Append lookup and two-city tasks to tasks.jsonl, with answers computed from the tool
data, for every city fact and city pair not yet asked about.

    .venv/bin/python data/corpus/more_tasks.py --lookups 30 --pairs 20

The programs are deterministic (temperature 0), so a task yields at most one recorded
success per framework: more labelled failures need more tasks. Ids continue each kind's
numbering; an existing task is never changed.
"""

from __future__ import annotations

import argparse
import json
import operator
import random
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "programs"))

from corpus_tools import CITIES  # noqa: E402

QUESTIONS = {
    "population": "What is the population of {city}?",
    "mayor": "Who is the mayor of {city}?",
    "founded": "In which year was {city} founded?",
    "country": "Which country is {city} in?",
    "elevation_m": "What is the elevation of {city} in metres?",
    "area_km2": "What is the area of {city} in square kilometres?",
}
PAIRS: dict[str, tuple[str, Callable[[int, int], int]]] = {
    "population": ("What is the combined population of {a} and {b}?", operator.add),
    "elevation_m": ("How many metres higher is {a} than {b}?", operator.sub),
    "founded": ("How many years after {b} was {a} founded?", operator.sub),
}


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lookups", type=int, default=30)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path = HERE / "tasks.jsonl"
    tasks = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    asked = {task["task"] for task in tasks}
    numbers = {
        kind: max((int(t["id"].rsplit("-", 1)[1]) for t in tasks if t["kind"] == kind), default=0)
        for kind in ("lookup", "table")
    }
    rng = random.Random(args.seed)
    lookups = [
        (QUESTIONS[fact].format(city=city), _number(facts[fact]))
        for city, facts in CITIES.items()
        for fact in QUESTIONS
    ]
    pairs = []
    for fact, (question, combine) in PAIRS.items():
        for a, fa in CITIES.items():
            for b, fb in CITIES.items():
                x, y = fa[fact], fb[fact]
                if not (isinstance(x, int) and isinstance(y, int)):
                    continue
                value = combine(x, y)
                if a != b and value > 0:
                    pairs.append((question.format(a=a, b=b), str(value)))
    added = []
    for kind, pool, count in (("lookup", lookups, args.lookups), ("table", pairs, args.pairs)):
        fresh = [item for item in pool if item[0] not in asked]
        rng.shuffle(fresh)
        for question, answer in fresh[:count]:
            numbers[kind] += 1
            added.append(
                {
                    "id": f"{kind}-{numbers[kind]:02d}",
                    "task": question,
                    "answer": answer,
                    "kind": kind,
                }
            )
    with path.open("a", encoding="utf-8") as out:
        for task in added:
            out.write(json.dumps(task) + "\n")
    print(f"added {len(added)} tasks to {path} ({len(tasks) + len(added)} in all)")


if __name__ == "__main__":
    main()
