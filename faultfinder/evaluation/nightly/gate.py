"""The regression gate: an entry against its last accepted one, on the records both scored.

Each gated metric is compared record by record: records right before and wrong now count
against the change, records wrong before and right now for it, the rest say nothing. A
one-sided exact McNemar test (`mcnemar_exact_p`) tells whether that many records going
against the change is beyond what noise makes; the suite's `alpha` is split evenly over
its metrics, so an unchanged entry fails one night in 1/alpha at most. A deterministic
attributor whose answers did not change has no discordant record and always passes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from faultfinder.attributors.scoring import mcnemar_exact_p
from faultfinder.server.store import BenchEntry, BenchVerdict

__all__ = ["GateResult", "MetricChange", "compare", "describe", "record_key"]

SHOWN_RECORDS = 12
"""Records named per metric in the printed comparison (the history holds them all)."""


def record_key(record: Mapping[str, Any]) -> tuple[str, str]:
    """A record is the same record only with the same id, gold label and step count."""
    return str(record["id"]), str(record["fingerprint"])


@dataclass(frozen=True)
class MetricChange:
    """One metric on the records both entries scored."""

    metric: str
    before: float
    after: float
    worse: list[str]
    """Records right in the baseline, wrong now."""
    better: list[str]
    """Records wrong in the baseline, right now."""
    p_worse: float
    """One-sided exact McNemar p-value of the change being for the worse."""
    p_better: float
    threshold: float
    """The p-value under which the change counts (alpha over the gated metrics)."""

    @property
    def regressed(self) -> bool:
        return bool(self.worse) and self.p_worse <= self.threshold

    @property
    def improved(self) -> bool:
        return bool(self.better) and self.p_better <= self.threshold

    def as_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "before": self.before,
            "after": self.after,
            "worse": self.worse,
            "better": self.better,
            "p_worse": self.p_worse,
            "p_better": self.p_better,
            "threshold": self.threshold,
            "regressed": self.regressed,
            "improved": self.improved,
        }


@dataclass(frozen=True)
class GateResult:
    verdict: BenchVerdict
    baseline: BenchEntry | None = None
    alpha: float = 0.05
    common: int = 0
    """Records both entries scored (same id, gold label and step count)."""
    new: int = 0
    """Records scored now that the baseline did not score."""
    gone: int = 0
    """Records the baseline scored that were not scored now."""
    metrics: list[MetricChange] = field(default_factory=list)

    def as_json(self) -> dict[str, Any] | None:
        if self.baseline is None:
            return None
        return {
            "baseline_id": self.baseline.id,
            "baseline_run": self.baseline.run_id,
            "baseline_code_version": self.baseline.code_version,
            "alpha": self.alpha,
            "test": "one-sided exact McNemar per metric, alpha split over the metrics",
            "common_records": self.common,
            "new_records": self.new,
            "gone_records": self.gone,
            "metrics": [change.as_json() for change in self.metrics],
        }


def compare(
    records: Sequence[Mapping[str, Any]],
    baseline: BenchEntry | None,
    *,
    alpha: float,
    metrics: Sequence[str],
) -> GateResult:
    """The gate's verdict on an entry's per-record results against `baseline`."""
    if baseline is None:
        return GateResult(BenchVerdict.FIRST, alpha=alpha)
    now = {record_key(record): record for record in records}
    before = {record_key(record): record for record in baseline.records}
    common = sorted(now.keys() & before.keys())
    threshold = alpha / max(1, len(metrics))
    changes = []
    for metric in metrics:
        worse = [key[0] for key in common if before[key][metric] and not now[key][metric]]
        better = [key[0] for key in common if now[key][metric] and not before[key][metric]]
        n = max(1, len(common))
        changes.append(
            MetricChange(
                metric=metric,
                before=sum(bool(before[key][metric]) for key in common) / n,
                after=sum(bool(now[key][metric]) for key in common) / n,
                worse=worse,
                better=better,
                p_worse=mcnemar_exact_p(len(worse), len(better)),
                p_better=mcnemar_exact_p(len(better), len(worse)),
                threshold=threshold,
            )
        )
    if any(change.regressed for change in changes):
        verdict = BenchVerdict.REGRESSION
    elif any(change.improved for change in changes):
        verdict = BenchVerdict.IMPROVED
    else:
        verdict = BenchVerdict.PASS
    return GateResult(
        verdict,
        baseline=baseline,
        alpha=alpha,
        common=len(common),
        new=len(now.keys() - before.keys()),
        gone=len(before.keys() - now.keys()),
        metrics=changes,
    )


def describe(entry: BenchEntry, baseline: BenchEntry | None) -> list[str]:
    """What changed against the baseline and on which records, as lines of text, from a
    stored entry's gate (nothing when nothing changed)."""
    gate = entry.gate
    if gate is None or baseline is None:
        return []
    changed = [change for change in gate["metrics"] if change["worse"] or change["better"]]
    new, gone = int(gate.get("new_records", 0)), int(gate.get("gone_records", 0))
    if not changed and not new and not gone:
        return []
    head = {
        BenchVerdict.REGRESSION: "REGRESSION",
        BenchVerdict.IMPROVED: "improved",
    }.get(BenchVerdict(entry.verdict), "changed within noise")
    lines = [
        f"{head}: {entry.entry} (attributor {entry.method}) against #{baseline.id} (run"
        f" {baseline.run_id}, code {baseline.code_version}) on the {gate['common_records']}"
        " records both scored"
        + (f"; {new} new records" if new else "")
        + (f"; {gone} no longer scored" if gone else "")
    ]
    now = {str(record["id"]): record for record in entry.records}
    then = {str(record["id"]): record for record in baseline.records}
    for change in changed:
        verdict = (
            "worse beyond noise"
            if change["regressed"]
            else "better beyond noise"
            if change["improved"]
            else "within noise"
        )
        p_value = min(float(change["p_worse"]), float(change["p_better"]))
        lines.append(
            f"  {change['metric']}: {100 * change['before']:.1f} % -> {100 * change['after']:.1f} %"
            f" ({len(change['worse'])} records worse, {len(change['better'])} better;"
            f" p = {p_value:.3g}, threshold {float(change['threshold']):.3g}: {verdict})"
        )
        for label in ("worse", "better"):
            ids = [str(record_id) for record_id in change[label]]
            if ids:
                shown = ", ".join(
                    _answer_change(i, then.get(i), now.get(i)) for i in ids[:SHOWN_RECORDS]
                )
                more = f", and {len(ids) - SHOWN_RECORDS} more" if len(ids) > SHOWN_RECORDS else ""
                lines.append(f"    {label} on: {shown}{more}")
    return lines


def _answer_change(
    record_id: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> str:
    if before is None or after is None:
        return record_id
    gold = before.get("gold") or {}
    return (
        f"{record_id} (gold {gold.get('agent')}@{gold.get('step')}: was"
        f" {_answer(before)}, now {_answer(after)})"
    )


def _answer(record: Mapping[str, Any]) -> str:
    answer = record.get("answer") or {}
    if answer.get("agent") is None or answer.get("step") is None:
        return "no answer"
    return f"{answer['agent']}@{answer['step']}"
