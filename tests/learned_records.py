"""Synthetic labelled runs for the learned attributor's tests: the culprit is the code
whose terminal output failed, a pattern a model can learn from a few dozen runs."""

from __future__ import annotations

import random

from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.datasets import BenchmarkRecord, GoldLabel

__all__ = ["synthetic_history", "synthetic_record", "synthetic_records"]


def synthetic_history(rng: random.Random) -> tuple[list[dict[str, str]], int]:
    n = rng.randint(5, 10)
    culprit = rng.randrange(0, n - 1, 2)
    history = []
    for i in range(n):
        if i == culprit:
            history.append(
                {
                    "name": "Coder",
                    "role": "assistant",
                    "content": "```python\nprint(load('data.csv'))\n```",
                }
            )
        elif i == culprit + 1:
            history.append(
                {
                    "name": "Computer_terminal",
                    "role": "user",
                    "content": "exitcode: 1 (execution failed)\nTraceback (most recent "
                    "call last):\nKeyError: 'rows'",
                }
            )
        elif i % 2:
            history.append(
                {
                    "name": "Computer_terminal",
                    "role": "user",
                    "content": "exitcode: 0 (execution succeeded)\nCode output: done",
                }
            )
        else:
            history.append(
                {
                    "name": rng.choice(["Planner", "Checker", "Coder"]),
                    "role": "assistant",
                    "content": f"Step {i}: looks fine to me.",
                }
            )
    return history, culprit  # fmt: skip


def synthetic_record(rng: random.Random, number: int, subset: str) -> BenchmarkRecord:
    history, culprit = synthetic_history(rng)
    steps = tuple(
        Step(
            index=i,
            agent=entry["name"],
            kind=StepKind.TOOL if entry["name"] == "Computer_terminal" else StepKind.MESSAGE,
            content=entry["content"],
        )
        for i, entry in enumerate(history)
    )
    trajectory = Trajectory(
        run_id=f"synthetic/{subset}/{number}", task="Count the rows.", ground_truth="7",
        steps=steps, metadata={"framework": subset},
    )  # fmt: skip
    return BenchmarkRecord(
        "synthetic", subset, f"{subset}/{number}", trajectory, GoldLabel("Coder", culprit)
    )


def synthetic_records(count: int, seed: int = 0) -> list[BenchmarkRecord]:
    rng = random.Random(seed)
    return [synthetic_record(rng, i, ("small", "large")[i % 2]) for i in range(count)]
