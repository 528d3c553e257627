"""Leave-one-framework-out cross-validation: each framework is scored only by a model that
never saw any of its runs, and records every fold also trains on are never scored."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.cli.bench import bench
from faultfinder.datasets import BenchmarkRecord, GoldLabel, write_records
from faultfinder.evaluation.run.cv.crossval import cross_validate
from faultfinder.evaluation.run.cv.folds import CVSettings, FoldOutcome, fold_plan
from faultfinder.training import ModelConfig


def record(framework: str, number: int) -> BenchmarkRecord:
    """A run whose Analyst states a figure the lookup never returned (the culprit)."""
    steps = (
        Step(index=0, agent="user", kind=StepKind.HUMAN, content=f"Population of town {number}?"),
        Step(index=1, agent="Researcher", content=f'lookup({{"town": "T{number}"}})'),
        Step(index=2, agent="lookup", kind=StepKind.TOOL, content=f"{1000 + 37 * number} people"),
        Step(index=3, agent="Researcher", content=f"Town {number} has {1000 + 37 * number}."),
        Step(index=4, agent="Analyst", content=f"The answer is {5000 + 91 * number}."),
        Step(index=5, agent="Reporter", content=f"FINAL ANSWER: {5000 + 91 * number}"),
    )
    trajectory = Trajectory(
        run_id=f"{framework}/{number}",
        task=f"Population of town {number}?",
        steps=steps,
        metadata={"framework": framework},
    )
    return BenchmarkRecord("synthetic", framework, f"{framework}/{number}", trajectory,
                           GoldLabel("Analyst", 4))  # fmt: skip


def records(*frameworks: str, each: int = 6) -> list[BenchmarkRecord]:
    return [record(framework, n) for framework in frameworks for n in range(each)]


def test_folds_by_framework_hold_out_one_whole_framework_each() -> None:
    data = records("alpha", "beta", "gamma", each=4)
    folds = fold_plan(data, 5, seed=3, group_by="framework")
    assert [{data[i].trajectory.metadata["framework"] for i in fold} for fold in folds] == [
        {"alpha"}, {"beta"}, {"gamma"},
    ]  # fmt: skip
    assert sorted(i for fold in folds for i in fold) == list(range(len(data)))


def test_leave_one_framework_out_scores_each_framework_by_a_model_blind_to_it() -> None:
    data = records("alpha", "beta", "gamma")
    extra = records("delta", each=4)
    seen: list[FoldOutcome] = []
    settings = CVSettings(
        folds=3, seeds=(0,), grid=(ModelConfig(kind="linear", l2=1.0),), inner_folds=2,
        group_by="framework", also_trained_on="delta",
    )  # fmt: skip
    summary = cross_validate(data, settings, on_fold=seen.append, also_train_on=extra)
    assert len(seen) == 3
    for fold in seen:
        held_out = {test.split("/")[0] for test in fold.test_ids}
        trained = {train.split("/")[0] for train in fold.train_ids}
        assert len(held_out) == 1 and not held_out & trained
        assert "delta" in trained  # always trained on, never scored
    assert set(summary["subsets"]) == {"alpha", "beta", "gamma", "overall"}
    assert summary["settings"]["group_by"] == "framework"
    assert summary["subsets"]["overall"]["n"] == 18


def test_bench_run_takes_a_generic_file_and_the_grouping(tmp_path: Path) -> None:
    data = tmp_path / "corpus.jsonl"
    with data.open("w") as handle:
        write_records(records("alpha", "beta", each=5), handle)
    runner = CliRunner()
    plain = runner.invoke(
        bench, ["run", "--dataset", str(data), "--attributor", "first_error", "--json",
                "--out", str(tmp_path / "fe")],
    )  # fmt: skip
    assert plain.exit_code == 0, plain.output
    summary = json.loads(plain.output[plain.output.index("{") :])
    assert set(summary["subsets"]) == {"alpha", "beta", "overall"}
    # The Analyst's made-up figure is the evidence first_error falls back to.
    assert summary["subsets"]["overall"]["accuracy"]["step"]["mean"] == 1.0
    misuse = runner.invoke(
        bench, ["run", "--dataset", str(data), "--attributor", "first_error",
                "--group-by", "framework"],
    )  # fmt: skip
    assert misuse.exit_code != 0 and "--group-by and --train-also apply to --cv" in misuse.output


def test_bench_transfer_reports_each_held_out_framework_and_mode(tmp_path: Path) -> None:
    data = tmp_path / "corpus.jsonl"
    corpus = records("alpha", "beta", "gamma", each=5)
    with data.open("w") as handle:
        write_records(corpus, handle)
    also = tmp_path / "also.jsonl"
    with also.open("w") as handle:
        write_records(records("delta", each=6), handle)
    out = tmp_path / "transfer"
    result = CliRunner().invoke(
        bench, ["transfer", "--dataset", str(data), "--train-also", str(also),
                "--cv-seeds", "1", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["records"] == 15 and summary["also_trained_on"] == 6
    table = summary["table"]
    assert {"framework:alpha", "framework:beta", "framework:gamma", "mode:-", "all"} <= set(table)
    assert table["all"]["n"] == 15
    # The made-up figure is the evidence every zero-LLM method here finds.
    assert table["all"]["first_error"]["step"] == 1.0
    assert abs(table["all"]["random"]["step"] - 1 / 6) < 1e-9
    assert "| alpha | 5 |" in (out / "report.md").read_text()
    # Each run's label and answers, to read which runs a method misses.
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert len(runs) == 15 and {run["framework"] for run in runs} == {"alpha", "beta", "gamma"}
    for run in runs:
        assert len(run["learned"]) == 1  # one answer per seed
        assert run["first_error"][:2] == run["gold"]
