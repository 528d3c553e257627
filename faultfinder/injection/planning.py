"""Which injection attempts a recording gets, and the counts that say how they went."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["OUTCOMES", "AttemptPlan", "corpus_counts", "spread_attempts"]

OUTCOMES = ("kept", "recovered", "diverged", "unmapped", "no_run", "not_applicable", "error")
"""How an attempt ends: kept (the run failed: labelled), recovered (it still succeeded),
diverged (the replayed prefix left the recording, or never reached the injection),
unmapped (no step shows the flawed reply), no_run (no trace arrived), not_applicable (the
mode could not be planted in that reply), error (the injector's model call failed)."""


@dataclass(frozen=True)
class AttemptPlan:
    task_id: str
    call: int
    mode: str

    @property
    def key(self) -> str:
        return f"{self.task_id}:{self.call}:{self.mode}"


def spread_attempts(
    task_id: str, by_mode: Mapping[str, Sequence[int]], count: int, rng: random.Random
) -> list[AttemptPlan]:
    """Up to `count` (call, mode) pairs of one recording, taking the modes in a shuffled
    round robin and a random call each time, so that every mode that can be planted gets
    a turn before any gets a second. A larger `count` extends the same list."""
    modes = [mode for mode in by_mode if by_mode[mode]]
    rng.shuffle(modes)
    chosen: list[AttemptPlan] = []
    used: set[tuple[int, str]] = set()
    while len(chosen) < count and modes:
        for mode in list(modes):
            free = [call for call in by_mode[mode] if (call, mode) not in used]
            if not free:
                modes.remove(mode)
                continue
            call = rng.choice(free)
            used.add((call, mode))
            chosen.append(AttemptPlan(task_id, call, mode))
            if len(chosen) >= count:
                break
    return chosen


def corpus_counts(
    framework: str,
    tasks: int,
    originals: Sequence[Mapping[str, Any]],
    attempts: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """Counts like the paper's: recorded runs, and per mode the attempts, diverged,
    recovered and kept; plus how many replayed prefixes matched their recording."""
    per_mode: dict[str, Counter[str]] = defaultdict(Counter)
    for item in attempts:
        per_mode[item["mode"]][item["outcome"]] += 1
    tried = [a for a in attempts if a["outcome"] not in ("not_applicable", "error")]
    replayed = [a for a in tried if a["outcome"] != "no_run"]
    return {
        "framework": framework,
        "tasks": tasks,
        "originals": dict(Counter(item["outcome"] for item in originals)),
        "attempts": len(tried),
        "outcomes": dict(Counter(a["outcome"] for a in attempts)),
        "prefix_replay": {
            "replayed": len(replayed),
            "matched": sum(1 for a in replayed if a["outcome"] != "diverged"),
        },
        "per_mode": {
            mode: {
                "attempts": sum(
                    v for k, v in counts.items() if k not in ("not_applicable", "error")
                ),
                **{outcome: counts.get(outcome, 0) for outcome in OUTCOMES},
            }
            for mode, counts in sorted(per_mode.items())
        },
    }
