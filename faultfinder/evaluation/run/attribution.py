"""Attributing records: what a benchmark run does, one record's scored outcome, the
concurrent pass over the records, and the uniform random baseline they are compared with."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from faultfinder.attributors.base import AttributeOptions, Attributor
from faultfinder.attributors.model import Attribution, validate_against
from faultfinder.attributors.scoring import (
    OVERALL,
    RandomExpectation,
    RecordScore,
    ScoredRecord,
    random_expectation,
    score_attribution,
)
from faultfinder.datasets import BenchmarkRecord

__all__ = [
    "BenchmarkSettings",
    "RecordOutcome",
    "attribute_records",
    "mean_expectations",
    "random_baseline",
    "random_expected",
]


@dataclass(frozen=True)
class BenchmarkSettings:
    """What a benchmark run does; recorded verbatim in summary.json."""

    dataset: str
    attributor: str
    use_ground_truth: bool = True
    limit: int | None = None
    """At most this many records per subset (None: all)."""
    concurrency: int = 4
    seed: int = 0
    repeats: int = 1
    """Repeat r uses seed `seed + r`."""
    attributor_config: Mapping[str, Any] = field(default_factory=dict)
    datasets_dir: str | None = None
    model: str | None = None
    """The model's identity for LLM methods (local model key or endpoint model name)."""
    model_settings: Mapping[str, Any] = field(default_factory=dict)
    """The client settings used (without the API key); recorded, not part of the identity."""
    selection: str = "all records"
    """How the records were chosen (limit, fixed fraction, record list)."""
    prefilter: Mapping[str, Any] | None = None
    """The learned pre-filter of LLM methods (top_k, cv_folds, cv_seed, cv_folds_by), None
    when off."""

    @property
    def seeds(self) -> list[int]:
        return [self.seed + r for r in range(self.repeats)]

    def identity(self) -> dict[str, Any]:
        """The settings a resumed run must share with the run it continues."""
        return {
            "dataset": self.dataset.strip().lower(),
            "attributor": self.attributor,
            "use_ground_truth": self.use_ground_truth,
            "model": self.model,
            "prefilter": dict(self.prefilter) if self.prefilter is not None else None,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "attributor": self.attributor,
            "use_ground_truth": self.use_ground_truth,
            "limit": self.limit,
            "concurrency": self.concurrency,
            "seed": self.seed,
            "repeats": self.repeats,
            "seeds": self.seeds,
            "attributor_config": dict(self.attributor_config),
            "datasets_dir": self.datasets_dir,
            "model": self.model,
            "model_settings": dict(self.model_settings),
            "selection": self.selection,
            "prefilter": dict(self.prefilter) if self.prefilter is not None else None,
        }


@dataclass(frozen=True)
class RecordOutcome:
    """One attribution of one record, with its score and measured latency."""

    record: BenchmarkRecord
    attribution: Attribution
    score: RecordScore
    latency_s: float
    repeat: int = 0
    seed: int | None = None
    invalid: str | None = None
    """Why the attribution does not fit the trajectory (unknown agent, step out of range)."""

    def scored(self) -> ScoredRecord:
        return ScoredRecord(
            subset=self.record.subset,
            score=self.score,
            llm_calls=self.attribution.llm_calls,
            prompt_tokens=self.attribution.prompt_tokens,
            completion_tokens=self.attribution.completion_tokens,
            latency_s=self.latency_s,
        )

    def as_json(self) -> dict[str, Any]:
        gold = self.record.gold
        return {
            "record_id": self.record.record_id,
            "dataset": self.record.dataset,
            "subset": self.record.subset,
            "repeat": self.repeat,
            "seed": self.seed,
            "n_steps": len(self.record.trajectory),
            "gold": {
                "agent": gold.agent,
                "step": gold.step,
                "reason": gold.reason,
                "mode": gold.mode,
            },
            "attribution": self.attribution.model_dump(mode="json"),
            "score": self.score.as_dict(),
            "invalid": self.invalid,
            "llm_calls": self.attribution.llm_calls,
            "prompt_tokens": self.attribution.prompt_tokens,
            "completion_tokens": self.attribution.completion_tokens,
            "latency_s": self.latency_s,
            "random_expected": random_expected(self.record),
        }


def random_expected(record: BenchmarkRecord) -> dict[str, float]:
    expectation: RandomExpectation = random_expectation(
        record.trajectory.roster, len(record.trajectory), record.gold.agent, record.gold.step
    )
    return {"agent": expectation.agent, "step": expectation.step}


async def _attribute_one(
    attributor: Attributor, record: BenchmarkRecord, options: AttributeOptions
) -> tuple[Attribution, float]:
    trajectory = record.trajectory
    if not options.use_ground_truth and trajectory.ground_truth is not None:
        # Withhold the answer from the method itself, not just by asking it not to look.
        trajectory = trajectory.model_copy(update={"ground_truth": None})
    started = time.perf_counter()
    try:
        attribution = await attributor.attribute(trajectory, options)
    except Exception as exc:  # one bad record must not end the run
        attribution = Attribution.failed(
            getattr(attributor, "name", "unknown"),
            f"attributor raised {type(exc).__name__}: {exc}",
            details={"exception": type(exc).__name__},
        )
    return attribution, time.perf_counter() - started


async def attribute_records(
    records: Sequence[BenchmarkRecord],
    attributor: Attributor,
    options: AttributeOptions,
    *,
    concurrency: int = 4,
    repeat: int = 0,
    on_outcome: Callable[[RecordOutcome], None] | None = None,
) -> list[RecordOutcome]:
    """Attribute and score every record, at most `concurrency` at a time, in input order."""
    limiter = anyio.CapacityLimiter(max(1, concurrency))
    outcomes: list[RecordOutcome | None] = [None] * len(records)

    async def visit(position: int, record: BenchmarkRecord) -> None:
        async with limiter:
            attribution, latency = await _attribute_one(attributor, record, options)
        outcome = RecordOutcome(
            record=record,
            attribution=attribution,
            score=score_attribution(attribution, record.gold.agent, record.gold.step),
            latency_s=latency,
            repeat=repeat,
            seed=options.seed,
            invalid=validate_against(attribution, record.trajectory),
        )
        outcomes[position] = outcome
        if on_outcome is not None:
            on_outcome(outcome)

    async with anyio.create_task_group() as group:
        for position, record in enumerate(records):
            group.start_soon(visit, position, record)
    return [outcome for outcome in outcomes if outcome is not None]


def random_baseline(records: Sequence[BenchmarkRecord]) -> dict[str, dict[str, float]]:
    """Expected accuracy of the uniform random baseline per subset and overall (fractions)."""
    return mean_expectations([(r.subset, random_expected(r)) for r in records])


def mean_expectations(
    items: Sequence[tuple[str, Mapping[str, float]]],
) -> dict[str, dict[str, float]]:
    groups: dict[str, list[Mapping[str, float]]] = {}
    for subset, expectation in items:
        groups.setdefault(subset, []).append(expectation)
    groups = {name: groups[name] for name in sorted(groups)}
    groups[OVERALL] = [expectation for _, expectation in items]
    result: dict[str, dict[str, float]] = {}
    for name, members in groups.items():
        n = max(1, len(members))
        result[name] = {
            "agent": sum(e["agent"] for e in members) / n,
            "step": sum(e["step"] for e in members) / n,
        }
    return result
