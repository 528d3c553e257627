"""`faultfinder bench run --attributor learned --cv 5` on the real Who&When data (one seed):
held-out folds only, sane accuracy, conformal coverage and auditor figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.datasets import load_dataset

SUBSETS = ("algorithm-generated", "hand-crafted")


@pytest.fixture(scope="module")
def summary(datasets_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("cv")
    result = CliRunner().invoke(
        main,
        ["bench", "run", "--dataset", "who_and_when", "--attributor", "learned",
         "--cv", "5", "--cv-seeds", "1", "--seed", "7", "--datasets-dir", str(datasets_dir),
         "--out", str(out), "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output + (result.stderr or "")
    data: dict[str, Any] = json.loads(result.stdout)
    assert json.loads((out / "summary.json").read_text(encoding="utf-8")) == data
    assert "conformal" in (out / "report.md").read_text(encoding="utf-8").casefold()
    return data


def test_every_record_is_scored_once_by_a_model_that_did_not_train_on_it(
    summary: dict[str, Any], datasets_dir: Path
) -> None:
    records = list(load_dataset("who_and_when", datasets_dir))
    folds = summary["folds"]
    assert isinstance(folds, list) and len(folds) == 5
    tested = [record_id for fold in folds for record_id in fold["test_ids"]]
    assert sorted(tested) == sorted(r.record_id for r in records)
    for fold in folds:
        assert fold["n_train"] == len(records) - len(fold["test_ids"])
        assert fold["seed"] == 7


def test_held_out_accuracy_is_sane_and_beats_random(summary: dict[str, Any]) -> None:
    subsets = summary["subsets"]
    assert isinstance(subsets, dict)
    for name in SUBSETS:
        accuracy = subsets[name]["accuracy"]
        expected = subsets[name]["random_expected"]
        assert accuracy["agent"]["mean"] > expected["agent"] + 0.1
        assert accuracy["step"]["mean"] > expected["step"] + 0.05
        assert (
            accuracy["step"]["mean"] <= accuracy["step_pm1"]["mean"] <= accuracy["step_pm3"]["mean"]
        )
        assert len(accuracy["step"]["values"]) == 1
        # first_error is scored on the same held-out records
        assert 0.0 < subsets[name]["first_error"]["step"]["mean"] < 1.0
    assert subsets["algorithm-generated"]["accuracy"]["step"]["mean"] >= 0.3
    assert subsets["overall"]["n"] == 184


def test_conformal_sets_cover_at_the_promised_rate(summary: dict[str, Any]) -> None:
    overall = summary["subsets"]["overall"]["conformal"]
    for alpha in ("0.1", "0.2"):
        coverage = overall[alpha]["coverage"]["mean"]
        # 184 held-out runs: allow about three standard errors below 1−α
        assert coverage >= 1 - float(alpha) - 0.09
        assert 0.0 < overall[alpha]["removed"]["mean"] < 1.0
    assert overall["0.2"]["removed"]["mean"] >= overall["0.1"]["removed"]["mean"]


def test_auditor_figures_are_reported(summary: dict[str, Any]) -> None:
    auditor = summary["subsets"]["overall"]["auditor"]
    assert 0.0 < auditor["alarm_rate"]["mean"] <= 1.0
    assert (
        0.0
        < auditor["first_alarm_precision"]["mean"]
        <= auditor["first_alarm_precision_pm3"]["mean"]
    )
    assert auditor["mean_steps_before_end"]["mean"] > 0.0
    # Each fold chose an alarm threshold per framework, on its training runs only.
    for fold in summary["folds"]:
        thresholds = fold["chosen"]["alarm_thresholds"]
        assert set(thresholds) == {"ag2", "magentic-one"}
        assert all(isinstance(value, float) for value in thresholds.values())


def test_cv_refuses_attributors_that_do_not_train(datasets_dir: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["bench", "run", "--dataset", "who_and_when", "--attributor", "first_error",
         "--cv", "5", "--datasets-dir", str(datasets_dir)],
    )  # fmt: skip
    assert result.exit_code != 0
    assert "only learned is trainable" in result.output
