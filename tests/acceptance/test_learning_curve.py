"""`faultfinder bench learning-curve` on the real Hand-Crafted records (one seed, three
folds, two shares): held-out points that match the plain CV, samples that keep a task's
runs together, and bad input named."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.attributors.learned import AgentRule, softmax
from faultfinder.attributors.model import normalise_agent
from faultfinder.cli import main
from faultfinder.datasets import load_dataset
from faultfinder.training import (
    DEFAULT_GRID,
    FeatureCache,
    RunMatrix,
    out_of_fold_scores,
    predicted_agent,
)
from faultfinder.training.learning_curve import _sample, parse_shares

DATASET = "who_and_when:hand-crafted"


@pytest.fixture(scope="module")
def summary(datasets_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("curve")
    result = CliRunner().invoke(
        main,
        ["bench", "learning-curve", "--dataset", DATASET, "--folds", "3", "--cv-seeds", "1",
         "--seed", "4", "--shares", "1,0.5", "--draws", "2", "--datasets-dir",
         str(datasets_dir), "--out", str(out), "--json", "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output + (result.stderr or "")
    data: dict[str, Any] = json.loads(result.stdout)
    assert json.loads((out / "summary.json").read_text(encoding="utf-8")) == data
    return data


def test_the_full_share_is_the_plain_cross_validation(
    summary: dict[str, Any], datasets_dir: Path
) -> None:
    """At share 1 every held-out record is scored by the ensemble fitted on the other
    folds: the same figure as out-of-fold scoring over the same task-grouped folds."""
    runs = FeatureCache().matrices(
        list(load_dataset(DATASET, datasets_dir)), use_ground_truth=True, prefix_only=False
    )
    scores = out_of_fold_scores(runs, DEFAULT_GRID, 3, 4)
    steps = agents = 0
    for run, s in zip(runs, scores, strict=True):
        p = softmax(s, 1.0, run.blameable)
        top = max(range(len(p)), key=lambda i: (p[i], -i))
        steps += top == run.gold_step
        agents += normalise_agent(predicted_agent(run, p, AgentRule.TOP_STEP)) == (
            normalise_agent(run.gold_agent)
        )
    full = next(e for e in summary["shares"] if e["share"] == 1.0)
    held = full["held_out"]["hand-crafted"]
    assert held["step"]["mean"] == pytest.approx(steps / len(runs))
    assert held["agent"]["mean"] == pytest.approx(agents / len(runs))
    # each of three folds trains on the other two: two thirds of the 58 runs
    assert full["train_runs"] == pytest.approx(58 * 2 / 3, abs=1)


def test_half_the_tasks_train_on_about_half_the_runs(summary: dict[str, Any]) -> None:
    by_share = {e["share"]: e for e in summary["shares"]}
    assert sorted(by_share) == [0.5, 1.0]
    assert by_share[0.5]["train_runs"] == pytest.approx(by_share[1.0]["train_runs"] / 2, abs=2)
    for entry in by_share.values():
        for metric in ("step", "agent"):
            held = entry["held_out"]["overall"][metric]["mean"]
            fitted = entry["fit_on_training_runs"]["overall"][metric]["mean"]
            assert 0.0 <= held <= 1.0 and 0.0 <= fitted <= 1.0
    assert set(summary["per_doubling"]["hand-crafted"]) == {"step", "agent"}
    assert summary["settings"]["folds_by"] == "task"


def _run(record_id: str, task: str) -> RunMatrix:
    import numpy as np

    return RunMatrix(
        record_id=record_id, subset="s", group=None, rows=np.zeros((1, 1)), gold_step=0,
        gold_agent="a", agents=("a",), blameable=(True,), task=task,
    )  # fmt: skip


def test_a_sample_keeps_or_drops_a_task_whole() -> None:
    train = [_run(f"r{i}", f"t{i // 2}") for i in range(20)]  # ten tasks of two runs
    for seed in range(5):
        sample = _sample(train, 0.3, random.Random(seed))
        tasks = {run.task for run in sample}
        assert len(tasks) == 3
        assert len(sample) == 6  # both runs of each kept task
    assert _sample(train, 1.0, random.Random(0)) == train


@pytest.mark.parametrize("text", ["0", "1.5", "half", ""])
def test_bad_shares_are_refused_naming_the_option(text: str) -> None:
    with pytest.raises(ValueError):
        parse_shares(text)
    result = CliRunner().invoke(main, ["bench", "learning-curve", "--shares", text])
    assert result.exit_code == 2
    assert "--shares" in result.output


def test_shares_are_sorted_and_repeats_dropped() -> None:
    assert parse_shares("1,0.25,0.25") == (0.25, 1.0)
