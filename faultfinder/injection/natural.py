"""Natural failures labelled by counterfactual replay: `faultfinder inject natural-collect`.

`faultfinder inject run` keeps the model calls of every recorded run that failed by
itself (`OUT/natural-recordings/<task>.json`). `faultfinder verify --search earliest`,
run on each of them into `OUT/verify/<task>/`, corrects the run's model-made steps one
at a time in order of position and stops at the first correction that makes the run
succeed: that step and its agent (`label.json`) are the run's label, found by testing
rather than planted. This module gathers the labelled runs into records of the generic
format (label source `counterfactual`) and counts what the search yielded: how many runs
failed, how many a correction flipped, how many nothing flipped or could not be replayed,
and where the flips fell.

    faultfinder inject natural-collect --out runs/langgraph --framework langgraph \\
        --dataset natural/langgraph.jsonl [--sidecar http://127.0.0.1:4318]
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from faultfinder.attributors.model import Trajectory
from faultfinder.datasets import BenchmarkRecord, GoldLabel, dump_record
from faultfinder.injection.exchanges import Recording
from faultfinder.injection.files import read_lines
from faultfinder.injection.step_calls import model_calls_of_steps

__all__ = [
    "NATURAL_DATASET",
    "NaturalRun",
    "natural_command",
    "natural_record",
    "natural_runs",
    "natural_yields",
]

NATURAL_DATASET = "faultfinder-natural"
"""`dataset` of the records gathered here."""

COUNTERFACTUAL_SOURCE = "counterfactual"
"""The label source: the earliest step whose correction made the run succeed."""


@dataclass(frozen=True)
class NaturalRun:
    """A recorded run that failed by itself, and what its verification found so far."""

    name: str
    """The recording's file name without `.json` (the task id, made safe for a path)."""
    recording: Recording
    verification: dict[str, Any] | None
    """`verify/<name>/verification.json`: present once the search finished."""
    label: dict[str, Any] | None
    """`verify/<name>/label.json`: present when a correction flipped the run."""

    @property
    def run_id(self) -> str:
        return str(self.recording.info.get("run_id") or "")

    @property
    def candidates(self) -> list[dict[str, Any]]:
        """The steps tried, in the order they were tried (by position)."""
        found = (self.verification or {}).get("candidates") or []
        return [item for item in found if isinstance(item, dict)]

    def verdict(self) -> str:
        """pending, labelled, nothing_flips (a correction was replayed and the run still
        failed each time), diverged (no correction could be replayed: the recorded
        prefix was not reproduced) or untested (no step had a correction to replay)."""
        if self.verification is None:
            return "pending"
        if self.label is not None:
            return "labelled"
        results = {item.get("result") for item in self.candidates}
        if "still_failed" in results:
            return "nothing_flips"
        return "diverged" if "diverged" in results else "untested"


def _json(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    loaded = json.loads(path.read_text(encoding="utf-8"))
    return loaded if isinstance(loaded, dict) else None


def natural_runs(out: Path) -> list[NaturalRun]:
    """Every kept natural failure under `out` (an `inject run --out` folder), by name."""
    runs = []
    for path in sorted((out / "natural-recordings").glob("*.json")):
        verify = out / "verify" / path.stem
        runs.append(
            NaturalRun(
                name=path.stem,
                recording=Recording.load(path),
                verification=_json(verify / "verification.json"),
                label=_json(verify / "label.json"),
            )
        )
    return runs


def natural_record(
    run: NaturalRun, trajectory: Trajectory, framework: str
) -> BenchmarkRecord | None:
    """The labelled run as a record of the generic format; None when it has no label or
    the label's agent is not the one at its step in `trajectory` (another reading of
    the run than the one verified)."""
    label = run.label
    if label is None:
        return None
    step = label.get("step")
    if not isinstance(step, int) or not 0 <= step < len(trajectory.steps):
        return None
    if trajectory.steps[step].agent != label.get("agent"):
        return None
    flipped = next((c for c in run.candidates if c.get("step") == step), {})
    info = run.recording.info
    details = {
        "task_id": info.get("task_id"),
        "framework": framework,
        "outcome": info.get("outcome"),
        "model_call": flipped.get("model_call"),
        "correction": flipped.get("correction"),
        "replays": flipped.get("replays"),
        "flips": flipped.get("flips"),
        "candidates_tried": len(run.candidates),
    }
    final = str(info.get("final_answer") or "")
    return BenchmarkRecord(
        dataset=NATURAL_DATASET,
        subset=framework,
        record_id=f"{framework}/{run.name}",
        trajectory=trajectory.model_copy(
            update={
                "metadata": {**trajectory.metadata, "framework": framework},
                "final_answer": final or trajectory.final_answer,
            }
        ),
        gold=GoldLabel(
            agent=str(label["agent"]),
            step=step,
            reason=str(label.get("reason") or ""),
            source=COUNTERFACTUAL_SOURCE,
        ),
        details=details,
    )


def _spread(values: Sequence[int]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "min": min(values),
        "median": statistics.median(values),
        "mean": round(statistics.fmean(values), 2),
        "max": max(values),
    }


def natural_yields(
    originals: Sequence[dict[str, Any]],
    runs: Sequence[NaturalRun],
    trajectories: dict[str, Trajectory],
    records: Sequence[BenchmarkRecord],
) -> dict[str, Any]:
    """What the recording and the search yielded (see the module docstring)."""
    outcomes = Counter(str(line.get("outcome")) for line in originals)
    verdicts = Counter(run.verdict() for run in runs)
    by_position: dict[int, Counter[str]] = {}
    results: Counter[str] = Counter()
    label_positions: Counter[int] = Counter()
    for run in runs:
        for position, candidate in enumerate(run.candidates):
            result = str(candidate.get("result"))
            by_position.setdefault(position, Counter())[result] += 1
            results[result] += 1
            if result == "flipped" and run.label is not None:
                label_positions[position] += 1
    steps = [len(trajectories[run.name].steps) for run in runs if run.name in trajectories]
    made = {
        run.name: sorted(model_calls_of_steps(trajectories[run.name], run.recording))
        for run in runs
        if run.name in trajectories
    }
    # A record's id ends in its run's name (a task id made safe for a path: no slash).
    at_last = sum(1 for r in records if made[r.record_id.rsplit("/", 1)[1]][-1:] == [r.gold.step])
    return {
        "runs": sum(outcomes.values()),
        "outcomes": dict(sorted(outcomes.items())),
        "failed": outcomes["wrong"] + outcomes["crash"],
        "recorded": len(runs),
        "verified": len(runs) - verdicts["pending"],
        "pending": verdicts["pending"],
        "labelled": verdicts["labelled"],
        "nothing_flips": verdicts["nothing_flips"],
        "diverged": verdicts["diverged"],
        "untested": verdicts["untested"],
        "kept": len(records),
        "candidate_results": dict(sorted(results.items())),
        "flips_per_candidate_position": {
            str(position): {"tried": sum(counts.values()), "flipped": counts["flipped"]}
            for position, counts in sorted(by_position.items())
        },
        "label_candidate_positions": {str(k): v for k, v in sorted(label_positions.items())},
        "label_steps": dict(
            sorted(Counter(str(record.gold.step) for record in records).items(), key=_numeric)
        ),
        "label_agents": dict(sorted(Counter(r.gold.agent for r in records).items())),
        "labels_at_last_model_step": at_last,
        "steps_per_run": _spread(steps),
        "steps_per_labelled_run": _spread([len(r.trajectory.steps) for r in records]),
        "model_steps_per_run": _spread([len(found) for found in made.values()]),
    }


def _numeric(item: tuple[str, int]) -> int:
    return int(item[0])


def collect(
    out: Path,
    framework: str,
    trajectory_of: Callable[[NaturalRun], Trajectory],
    dataset: Path,
) -> dict[str, Any]:
    """Write the labelled runs under `out` to `dataset` (whole, replacing it) and
    return the yields."""
    runs = natural_runs(out)
    trajectories = {run.name: trajectory_of(run) for run in runs if run.verdict() != "pending"}
    records = [
        record
        for run in runs
        if run.name in trajectories
        and (record := natural_record(run, trajectories[run.name], framework)) is not None
    ]
    dataset.parent.mkdir(parents=True, exist_ok=True)
    partial = dataset.with_name(dataset.name + ".partial")
    partial.write_text("".join(dump_record(record) + "\n" for record in records))
    partial.replace(dataset)
    originals = read_lines(out / "originals.jsonl")
    return natural_yields(originals, runs, trajectories, records)


def _recorded_trajectory(run: NaturalRun) -> Trajectory:
    return Trajectory.model_validate(run.recording.info["trajectory"])


@click.command("natural-collect")
@click.option("--out", required=True,
              type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="The `inject run --out` folder (natural-recordings/, verify/).")  # fmt: skip
@click.option("--framework", required=True, help="The program's framework (the records' subset).")
@click.option("--dataset", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The JSON Lines file to write the labelled runs to (replaced).")  # fmt: skip
@click.option("--sidecar", "sidecar_url", help="The sidecar that holds the runs (the trajectory"
              " verified); default: the trajectory kept in each recording.")  # fmt: skip
@click.option("--sidecar-api-key", envvar="FAULTFINDER_API_KEY", help="$FAULTFINDER_API_KEY.")
def natural_command(
    out: Path, framework: str, dataset: Path, sidecar_url: str | None, sidecar_api_key: str | None
) -> None:
    """Gather the natural failures that `faultfinder verify --search earliest` labelled
    (OUT/verify/<task>/label.json) into DATASET in the generic format, label source
    `counterfactual`, and print what the search yielded as JSON."""
    if sidecar_url is None:
        yields = collect(out, framework, _recorded_trajectory, dataset)
    else:
        from faultfinder.injection.sidecar_api import SidecarAPI

        sidecar = SidecarAPI(sidecar_url, sidecar_api_key)
        try:
            yields = collect(out, framework, lambda run: sidecar.trajectory(run.run_id), dataset)
        finally:
            sidecar.close()
    click.echo(
        f"{framework}: {yields['runs']} runs, {yields['failed']} failed, {yields['recorded']}"
        f" recorded, {yields['verified']} verified, {yields['labelled']} labelled,"
        f" {yields['nothing_flips']} nothing flips, {yields['diverged']} diverged;"
        f" {yields['kept']} written to {dataset}",
        err=True,
    )
    click.echo(json.dumps(yields, indent=2))
