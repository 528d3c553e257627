"""The cross-validation's summary: held-out accuracy of the learned attributor and of
first-error on the same folds (mean and spread over seeds), conformal coverage, the
online auditor's first alarms, latency and the accuracy per error mode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from faultfinder.attributors.scoring import (
    OVERALL,
    ScoredRecord,
    aggregate,
    score_attribution,
    spread,
)
from faultfinder.datasets import BenchmarkRecord
from faultfinder.evaluation.run.attribution import random_baseline
from faultfinder.evaluation.run.cv.folds import CVSettings, FoldOutcome, HeldOutRecord
from faultfinder.evaluation.run.reliability import Answer, reliability

__all__ = ["summarise"]


def _accuracy_over_seeds(
    per_seed: dict[int, list[ScoredRecord]],
) -> dict[str, dict[str, Any]]:
    aggregated = {seed: aggregate(scored) for seed, scored in per_seed.items()}
    first = next(iter(aggregated.values()))
    result: dict[str, dict[str, Any]] = {}
    for subset in first:
        accuracy: dict[str, Any] = {}
        for metric in first[subset].accuracy:
            values = [aggregated[seed][subset].accuracy[metric] for seed in aggregated]
            accuracy[metric] = {**spread(values), "values": values}
        result[subset] = {"n": first[subset].n, "accuracy": accuracy}
    return result


def _by_subset(outcomes: Sequence[HeldOutRecord]) -> dict[str, list[HeldOutRecord]]:
    groups: dict[str, list[HeldOutRecord]] = {}
    for outcome in outcomes:
        groups.setdefault(outcome.record.subset, []).append(outcome)
    result = {name: groups[name] for name in sorted(groups)}
    result[OVERALL] = list(outcomes)
    return result


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _conformal_stats(outcomes: Sequence[HeldOutRecord], alpha: float) -> dict[str, float]:
    usable = [o for o in outcomes if alpha in o.covered]
    return {
        "coverage": _mean([float(o.covered[alpha]) for o in usable]),
        "removed": _mean([o.removed[alpha] for o in usable]),
        "n": float(len(usable)),
    }


def _auditor_stats(outcomes: Sequence[HeldOutRecord], k_values: Sequence[int]) -> dict[str, float]:
    alarmed = [o for o in outcomes if o.alarm_step is not None]
    stats: dict[str, float] = {
        "alarm_rate": len(alarmed) / len(outcomes) if outcomes else 0.0,
        "first_alarm_precision": _mean(
            [float(o.alarm_step == o.record.gold.step) for o in alarmed]
        ),
        "first_alarm_agent_precision": _mean(
            [
                float((o.alarm_agent or "").casefold() == o.record.gold.agent.casefold())
                for o in alarmed
            ]
        ),
        "mean_steps_before_end": _mean(
            [float(len(o.record.trajectory) - 1 - (o.alarm_step or 0)) for o in alarmed]
        ),
        "mean_fraction_before_end": _mean(
            [
                (len(o.record.trajectory) - 1 - (o.alarm_step or 0)) / len(o.record.trajectory)
                for o in alarmed
            ]
        ),
    }
    for k in k_values:
        stats[f"first_alarm_precision_pm{k}"] = _mean(
            [float(abs((o.alarm_step or 0) - o.record.gold.step) <= k) for o in alarmed]
        )
    return stats


def _over_seeds(per_seed: Sequence[dict[str, float]]) -> dict[str, dict[str, Any]]:
    keys = per_seed[0].keys() if per_seed else []
    return {key: {**spread([s[key] for s in per_seed]), "values": [s[key] for s in per_seed]}
            for key in keys}  # fmt: skip


def summarise(
    records: Sequence[BenchmarkRecord],
    settings: CVSettings,
    held_out: dict[int, list[HeldOutRecord]],
    folds: Sequence[FoldOutcome],
    wall_time: float,
) -> dict[str, Any]:
    def scored(which: str) -> dict[int, list[ScoredRecord]]:
        return {
            seed: [
                ScoredRecord(
                    subset=o.record.subset,
                    score=score_attribution(
                        o.learned if which == "learned" else o.first_error,
                        o.record.gold.agent,
                        o.record.gold.step,
                        settings.tolerances,
                    ),
                    latency_s=(o.learned if which == "learned" else o.first_error).latency_s,
                )
                for o in outcomes
            ]
            for seed, outcomes in held_out.items()
        }

    learned = _accuracy_over_seeds(scored("learned"))
    first_error = _accuracy_over_seeds(scored("first_error"))
    expected = random_baseline(records)
    per_seed_groups = {seed: _by_subset(outcomes) for seed, outcomes in held_out.items()}
    subsets: dict[str, Any] = {}
    for name, entry in learned.items():
        conformal = {
            str(alpha): _over_seeds(
                [_conformal_stats(groups[name], alpha) for groups in per_seed_groups.values()]
            )
            for alpha in settings.alphas
        }
        auditor = _over_seeds(
            [
                _auditor_stats(groups[name], settings.tolerances)
                for groups in per_seed_groups.values()
            ]
        )
        subsets[name] = {
            **entry,
            "failed": {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0, "values": []},
            "cost": {"mean_llm_calls": 0.0, "mean_prompt_tokens": 0.0,
                     "mean_completion_tokens": 0.0,
                     "mean_latency_s": _mean([o.learned.latency_s
                                              for groups in per_seed_groups.values()
                                              for o in groups[name]])},
            "random_expected": expected.get(name, {"agent": 0.0, "step": 0.0}),
            "first_error": first_error[name]["accuracy"],
            "conformal": conformal,
            "auditor": auditor,
        }  # fmt: skip
    return {
        "dataset": ",".join(sorted({r.dataset for r in records})),
        "attributor": "learned",
        "mode": "cross-validation",
        "error_modes": _by_error_mode(held_out),
        "reliability": {
            name: reliability(
                Answer(
                    basis=o.learned.basis,
                    confidence=o.learned.confidence,
                    step_right=o.learned.step == o.record.gold.step,
                )
                for outcomes in held_out.values()
                for o in outcomes
                if name == OVERALL or o.record.subset == name
            )
            for name in [*sorted({o.record.subset for v in held_out.values() for o in v}), OVERALL]
        },
        "records": [
            {
                "id": o.record.record_id,
                "seed": seed,
                "subset": o.record.subset,
                "error_mode": o.record.gold.mode,
                "gold": [o.record.gold.agent, o.record.gold.step],
                "learned": [o.learned.agent, o.learned.step],
                "learned_basis": o.learned.basis,
                "learned_confidence": o.learned.confidence,
                "first_error": [o.first_error.agent, o.first_error.step],
            }
            for seed, outcomes in held_out.items()
            for o in outcomes
        ],
        "settings": {**settings.as_dict(), "repeats": len(settings.seeds)},
        "wall_time_s": wall_time,
        "subsets": subsets,
        "folds": [
            {
                "seed": f.seed,
                "fold": f.fold,
                "n_train": len(f.train_ids),
                "test_ids": list(f.test_ids),
                "chosen": f.chosen,
            }
            for f in folds
        ],
    }


def _by_error_mode(held_out: dict[int, list[HeldOutRecord]]) -> dict[str, dict[str, Any]]:
    """Held-out accuracy per labelled error mode (records without one under "-"), as the
    mean over seeds: which modes the attributors find and which they do not."""
    table: dict[str, dict[str, Any]] = {}
    seeds = len(held_out) or 1
    for outcomes in held_out.values():
        for o in outcomes:
            entry = table.setdefault(
                o.record.gold.mode or "-",
                {"n": 0, "learned": {"agent": 0.0, "step": 0.0},
                 "first_error": {"agent": 0.0, "step": 0.0}},
            )  # fmt: skip
            entry["n"] += 1
            for name, attribution in (("learned", o.learned), ("first_error", o.first_error)):
                score = score_attribution(attribution, o.record.gold.agent, o.record.gold.step)
                entry[name]["agent"] += float(score.agent)
                entry[name]["step"] += float(score.step)
    for entry in table.values():
        for name in ("learned", "first_error"):
            for metric in ("agent", "step"):
                entry[name][metric] /= entry["n"]
        entry["n"] //= seeds
    return dict(sorted(table.items()))


# --- command line -------------------------------------------------------------
