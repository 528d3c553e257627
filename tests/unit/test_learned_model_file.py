"""The learned attributor's model file: a round trip scores identically, a group sharing
the pooled scorer stores it once, compiled trees match the node walk, and a bad file
names the file and the field (or the framework's group) at fault."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from faultfinder.attributors.learned import (
    MeanScorer,
    ModelFormatError,
    RegressionTree,
    StepModel,
    TreeEnsembleScorer,
    default_model,
)
from faultfinder.attributors.learned.features import step_features
from faultfinder.datasets import BenchmarkRecord
from tests.learned_records import synthetic_records


def test_model_json_round_trip_scores_identically(tmp_path: Path) -> None:
    model = default_model()
    path = tmp_path / "model.json"
    model.save(path)
    loaded = StepModel.load(path)
    trajectory = synthetic_records(1)[0].trajectory
    assert loaded.score(trajectory) == model.score(trajectory)
    assert loaded.agent_rule == model.agent_rule
    assert loaded.auditor is not None and loaded.auditor.alarm_threshold is not None


def test_a_group_that_shares_the_pooled_scorer_stores_it_once(tmp_path: Path) -> None:
    model = default_model()
    sharp = StepModel(features=model.features, scorer=model.scorer, temperature=0.25)
    shared = replace(model, groups={"ag2": sharp})
    shared.save(tmp_path / "shared.json")
    text = (tmp_path / "shared.json").read_text(encoding="utf-8")
    assert "scorer" not in json.loads(text)["groups"]["ag2"]
    assert isinstance(model.scorer, MeanScorer)
    own = replace(model, groups={"ag2": replace(sharp, scorer=model.scorer.members[0])})
    own.save(tmp_path / "own.json")
    assert (
        "scorer" in json.loads((tmp_path / "own.json").read_text(encoding="utf-8"))["groups"]["ag2"]
    )
    loaded = StepModel.load(tmp_path / "shared.json")
    record = synthetic_records(1)[0]
    trajectory = record.trajectory.model_copy(update={"metadata": {"framework": "ag2"}})
    assert loaded.for_group("ag2").scorer == model.scorer
    assert loaded.for_group("ag2").temperature == 0.25
    assert loaded.score(trajectory) == shared.score(trajectory)


def test_compiled_trees_give_exactly_the_node_walk_values(
    who_and_when: list[BenchmarkRecord],
) -> None:
    scorer = default_model().scorer
    assert isinstance(scorer, MeanScorer)
    ensembles = [m for m in scorer.members if isinstance(m, TreeEnsembleScorer)]
    assert ensembles
    for record in who_and_when[::9]:
        for row in step_features(record.trajectory):
            for ensemble in ensembles:
                walked = ensemble.base + sum(tree.score(row) for tree in ensemble.trees)
                assert ensemble.score(row) == walked
    # A constant that is not a finite number cannot be written as a literal: walked instead.
    leaf = -1
    tree = RegressionTree(
        feature=(0, leaf, leaf),
        threshold=(0.5, 0.0, 0.0),
        left=(1, leaf, leaf),
        right=(2, leaf, leaf),
        value=(0.0, -math.inf, 1.0),
    )
    odd = TreeEnsembleScorer((tree,), base=0.5)
    assert odd.score([0.0]) == -math.inf and odd.score([1.0]) == 1.5


def test_bad_model_files_name_the_file_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ModelFormatError, match=r"broken\.json"):
        StepModel.load(path)

    data = default_model().to_dict()
    trees = next(i for i, m in enumerate(data["scorer"]["members"]) if m["type"] == "trees")
    data["scorer"]["members"][trees]["trees"][0]["feature"][0] = 10_000
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(
        ModelFormatError, match=rf"broken\.json.*scorer\.members\[{trees}\]\.trees\[0\]"
    ):
        StepModel.load(path)

    data = default_model().to_dict()
    data["scorer"]["members"][0]["weights"][0] = "heavy"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ModelFormatError, match=r"scorer\.members\[0\].*linear"):
        StepModel.load(path)

    data = default_model().to_dict()
    data["scorer"] = {"type": "mean", "members": []}
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ModelFormatError, match=r"scorer\.members.*non-empty"):
        StepModel.load(path)

    data = default_model().to_dict()
    data["features"] = data["features"][:-1]
    data["scorer"] = {"type": "linear", "mean": [0.0] * len(data["features"]),
                      "scale": [1.0] * len(data["features"]),
                      "weights": [0.0] * len(data["features"])}  # fmt: skip
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ModelFormatError, match="retrain"):
        StepModel.load(path)

    with pytest.raises(ModelFormatError, match="format"):
        StepModel.from_dict({"format": "something/else"})


def test_a_bad_group_model_names_the_group(tmp_path: Path) -> None:
    data = default_model().to_dict()
    data["groups"] = {"ag2": {"format": "something/else"}}
    path = tmp_path / "grouped.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ModelFormatError, match=r"group 'ag2'.*format"):
        StepModel.load(path)
