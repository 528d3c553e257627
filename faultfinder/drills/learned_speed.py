"""Speed of the `learned` attributor and the online auditor on the longest Who&When run.

`python -m faultfinder.drills.learned_speed` prints median and p95 latency; the
budget is 50 ms for one attribution of a 130-step run.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import click

from faultfinder.attributors.auditor import Auditor
from faultfinder.attributors.base import AttributeOptions
from faultfinder.attributors.learned import LearnedAttributor, default_model
from faultfinder.datasets import load_dataset, resolve_datasets_dir
from faultfinder.datasets.options import datasets_dir_option

BUDGET_MS = 50.0


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@click.command()
@click.option("--repeats", type=click.IntRange(min=1), default=30, show_default=True)
@datasets_dir_option
def main(repeats: int, datasets_dir: Path | None) -> None:
    """Time the learned attributor on the longest Who&When run."""
    records = list(load_dataset("who_and_when", resolve_datasets_dir(datasets_dir)))
    record = max(records, key=lambda r: (len(r.trajectory), r.record_id))
    trajectory = record.trajectory
    model = default_model()
    attributor = LearnedAttributor(model)
    options = AttributeOptions()
    attributor.attribute_now(trajectory, options)  # warm caches (regexes, model)

    # CPU time beside wall time: on a shared machine other processes inflate the latter.
    attribution_ms = []
    cpu_ms = []
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        attributor.attribute_now(trajectory, options)
        attribution_ms.append(1000 * (time.perf_counter() - started))
        cpu_ms.append(1000 * (time.process_time() - started_cpu))

    # The auditor sees the run grow one step at a time.
    observe_ms = []
    for repeat in range(max(1, repeats // 10)):
        auditor = Auditor(model)
        for end in range(1, len(trajectory) + 1):
            prefix = trajectory.model_copy(
                update={"steps": trajectory.steps[:end], "run_id": f"speed-{repeat}"}
            )
            started = time.perf_counter()
            auditor.observe(prefix)
            observe_ms.append(1000 * (time.perf_counter() - started))

    median = statistics.median(attribution_ms)
    click.echo(
        f"{record.record_id}: {len(trajectory)} steps, "
        f"{sum(len(s.content) for s in trajectory.steps)} characters, "
        f"model {model.scorer.__class__.__name__} with {len(model.features)} features"
    )
    click.echo(
        f"learned attribution: median {median:.1f} ms, p95 "
        f"{_percentile(attribution_ms, 0.95):.1f} ms, max {max(attribution_ms):.1f} ms "
        f"(budget {BUDGET_MS:.0f} ms: {'ok' if median <= BUDGET_MS else 'OVER'}); "
        f"CPU time median {statistics.median(cpu_ms):.1f} ms"
    )
    click.echo(
        f"auditor observe (one new step): median {statistics.median(observe_ms):.2f} ms, "
        f"p95 {_percentile(observe_ms, 0.95):.2f} ms"
    )


if __name__ == "__main__":
    main()
