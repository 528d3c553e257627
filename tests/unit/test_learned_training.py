"""Training the learned attributor: exported scorers match training, configs are averaged,
folds keep a task's runs together and cross-validation never scores what it trained on,
`faultfinder train` writes a model the attributor loads, and each framework gets the model
that fits its runs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from faultfinder.attributors.base import AttributeOptions, get_attributor
from faultfinder.attributors.learned import (
    CONVERSATION,
    AgentRule,
    LearnedAttributor,
    MeanScorer,
    StepModel,
    is_conversation,
    softmax,
)
from faultfinder.attributors.model import Attribution, AttributionStatus, Step, StepKind
from faultfinder.datasets import BenchmarkRecord, GoldLabel, load_dataset
from faultfinder.evaluation.run.cv.crossval import cross_validate
from faultfinder.evaluation.run.cv.folds import CVSettings, FoldOutcome, fold_plan
from faultfinder.training import (
    FeatureCache,
    ModelConfig,
    TrainingOptions,
    batch_scores,
    beats_by_one_standard_error,
    fit_scorer,
    stratified_folds,
    task_key,
    tune_and_fit,
)
from faultfinder.training.command import train_command
from tests.learned_records import synthetic_history, synthetic_record, synthetic_records

OPTIONS = AttributeOptions()


@pytest.mark.parametrize(
    "config", [ModelConfig(kind="trees", n_trees=30), ModelConfig(kind="linear", l2=1.0)]
)
def test_exported_scorer_matches_training_and_learns_the_pattern(config: ModelConfig) -> None:
    records = synthetic_records(80)
    cache = FeatureCache()
    train = cache.matrices(records[:60], use_ground_truth=True, prefix_only=False)
    test = cache.matrices(records[60:], use_ground_truth=True, prefix_only=False)
    scorer = fit_scorer(train, config, seed=0)
    hits = 0
    for run in test:
        pure = [scorer.score(row) for row in run.rows.tolist()]
        assert np.allclose(batch_scores(scorer, run.rows), pure)
        hits += int(np.argmax(pure)) == run.gold_step
    # The culprit is the code before the failing terminal output: learnable.
    assert hits / len(test) >= 0.8


def test_trees_are_fitted_to_the_step_likelihood_not_just_to_an_order() -> None:
    # Trained under the conditional-logit likelihood, tree scores are log-potentials: on
    # runs where the culprit is plain to see, its softmax probability is high, as for the
    # linear model, so the two can be averaged on one scale.
    records = synthetic_records(80)
    cache = FeatureCache()
    train = cache.matrices(records[:60], use_ground_truth=True, prefix_only=False)
    test = cache.matrices(records[60:], use_ground_truth=True, prefix_only=False)
    for config in (ModelConfig(kind="trees", n_trees=60), ModelConfig(kind="linear", l2=1.0)):
        scorer = fit_scorer(train, config, seed=0)
        gold = [softmax(list(batch_scores(scorer, run.rows)))[run.gold_step] for run in test]
        assert sum(gold) / len(gold) >= 0.6, config.label()


def test_training_averages_every_config_instead_of_picking_one() -> None:
    records = synthetic_records(40)
    cache = FeatureCache()
    grid = (ModelConfig(kind="linear", l2=1.0), ModelConfig(kind="trees", n_trees=20))
    options = TrainingOptions(grid=grid, inner_folds=3, seed=0)
    model = tune_and_fit(records, cache=cache, options=options)
    assert isinstance(model.scorer, MeanScorer) and len(model.scorer.members) == 2
    assert model.auditor is not None and isinstance(model.auditor.scorer, MeanScorer)
    assert model.agent_rule == AgentRule.TOP_STEP
    runs = cache.matrices(records, use_ground_truth=True, prefix_only=False)
    alone = [fit_scorer(runs, config, seed=0) for config in grid]
    for row in runs[0].rows.tolist():
        assert model.scorer.score(row) == pytest.approx(sum(m.score(row) for m in alone) / 2)
    assert [m["kind"] for m in model.training["configs"]] == ["linear", "trees"]


def test_a_framework_model_must_beat_the_pooled_one_by_more_than_the_noise() -> None:
    assert beats_by_one_standard_error([0.5] * 10 + [0.0] * 10)
    assert not beats_by_one_standard_error([0.5, -0.5] * 10 + [0.5])
    assert not beats_by_one_standard_error([0.0] * 20)
    assert not beats_by_one_standard_error([1.0])


def test_stratified_folds_are_disjoint_cover_everything_and_balance_subsets() -> None:
    subsets = ["a"] * 126 + ["h"] * 58
    folds = stratified_folds(subsets, 5, seed=3)
    flat = [i for fold in folds for i in fold]
    assert sorted(flat) == list(range(len(subsets)))  # disjoint and complete
    assert max(map(len, folds)) - min(map(len, folds)) <= 1
    for fold in folds:
        hand_crafted = sum(subsets[i] == "h" for i in fold)
        assert 11 <= hand_crafted <= 12
    assert stratified_folds(subsets, 5, seed=3) == folds
    assert stratified_folds(subsets, 5, seed=4) != folds
    with pytest.raises(ValueError, match="at least 2"):
        stratified_folds(subsets, 1, seed=0)


def round_robin_folds(subsets: list[str], k: int, seed: int) -> list[list[int]]:
    """The folds before task grouping: per subset (sorted), shuffle, deal round-robin."""
    rng = random.Random(seed)
    folds: list[list[int]] = [[] for _ in range(k)]
    cursor = 0
    for subset in sorted(set(subsets)):
        members = [i for i, s in enumerate(subsets) if s == subset]
        rng.shuffle(members)
        for index in members:
            folds[cursor % k].append(index)
            cursor += 1
    return [sorted(fold) for fold in folds]


def test_runs_of_one_task_share_a_fold_and_subsets_stay_balanced() -> None:
    # 126 + 58 records as in Who&When, 42 tasks asked in both subsets.
    subsets = ["a"] * 126 + ["h"] * 58
    tasks = (
        [f"t{i}" for i in range(126)] + [f"t{i}" for i in range(42)] + [f"h{i}" for i in range(16)]
    )
    for seed in range(5):
        folds = stratified_folds(subsets, 5, seed, tasks)
        flat = [i for fold in folds for i in fold]
        assert sorted(flat) == list(range(len(subsets)))
        fold_of = {i: n for n, fold in enumerate(folds) for i in fold}
        for twin in range(42):
            assert fold_of[twin] == fold_of[126 + twin], (seed, twin)
        algorithm = [sum(subsets[i] == "a" for i in fold) for fold in folds]
        hand = [sum(subsets[i] == "h" for i in fold) for fold in folds]
        assert max(algorithm) - min(algorithm) <= 1
        assert max(hand) - min(hand) <= 1, hand
        assert stratified_folds(subsets, 5, seed, tasks) == folds
    # Without tasks, with distinct tasks, and with one prompt for every run (a template:
    # more runs than a fold holds, dealt run by run): the plain round-robin folds that
    # every earlier seed's figures were measured on.
    distinct = [str(i) for i in range(len(subsets))]
    template = ["Summarise the ticket."] * len(subsets)
    for seed in range(5):
        for k in (2, 3, 5):
            expected = round_robin_folds(subsets, k, seed)
            assert stratified_folds(subsets, k, seed) == expected
            assert stratified_folds(subsets, k, seed, distinct) == expected
            assert stratified_folds(subsets, k, seed, template) == expected
    with pytest.raises(ValueError, match="task keys"):
        stratified_folds(subsets, 5, 0, tasks[:-1])


def test_who_and_when_folds_never_split_a_question(datasets_dir: Path) -> None:
    records = list(load_dataset("who_and_when", datasets_dir))
    by_task: dict[str, set[str]] = {}
    for record in records:
        by_task.setdefault(task_key(record.trajectory), set()).add(record.subset)
    assert sum(len(s) == 2 for s in by_task.values()) == 42  # asked in both subsets
    for seed in (0, 1, 2):
        fold_of = {
            records[i].record_id: n
            for n, fold in enumerate(fold_plan(records, 5, seed))
            for i in fold
        }
        folds_of_task: dict[str, set[int]] = {}
        for record in records:
            folds_of_task.setdefault(task_key(record.trajectory), set()).add(
                fold_of[record.record_id]
            )
        assert all(len(f) == 1 for f in folds_of_task.values())


def test_cross_validation_never_scores_a_record_it_trained_on() -> None:
    records = synthetic_records(30)
    seen: list[FoldOutcome] = []
    settings = CVSettings(
        folds=3, seeds=(0, 1), grid=(ModelConfig(kind="linear", l2=1.0),), inner_folds=2
    )
    summary = cross_validate(records, settings, on_fold=seen.append)
    ids = {r.record_id for r in records}
    for seed in (0, 1):
        folds = [f for f in seen if f.seed == seed]
        assert len(folds) == 3
        tested = [i for f in folds for i in f.test_ids]
        assert sorted(tested) == sorted(ids)  # every record scored exactly once
        for f in folds:
            assert not set(f.train_ids) & set(f.test_ids)
            assert set(f.train_ids) | set(f.test_ids) == ids
        assert [sorted(f.test_ids) for f in folds] == [
            sorted(records[i].record_id for i in fold) for fold in fold_plan(records, 3, seed)
        ]
    overall = summary["subsets"]["overall"]
    assert overall["n"] == 30
    assert overall["accuracy"]["step"]["mean"] >= 0.7
    assert len(overall["accuracy"]["step"]["values"]) == 2
    assert set(overall["conformal"]) == {"0.1", "0.2"}


def write_who_and_when(root: Path, count: int) -> None:
    folder = root / "who_and_when" / "Algorithm-Generated"
    folder.mkdir(parents=True)
    rng = random.Random(5)
    for number in range(1, count + 1):
        history, culprit = synthetic_history(rng)
        record = {
            "question": "Count the rows.", "question_ID": f"q{number}", "level": "1",
            "ground_truth": "7", "is_correct": False, "history": history,
            "mistake_agent": "Coder", "mistake_step": str(culprit),
            "mistake_reason": "The code read the wrong column.",
        }  # fmt: skip
        (folder / f"{number}.json").write_text(json.dumps(record), encoding="utf-8")


async def test_train_command_writes_a_model_the_attributor_loads(tmp_path: Path) -> None:
    write_who_and_when(tmp_path / "data", 24)
    out = tmp_path / "models" / "mine.json"
    result = CliRunner().invoke(
        train_command,
        ["--dataset", "who_and_when:algorithm-generated", "--out", str(out),
         "--datasets-dir", str(tmp_path / "data"), "--seed", "1"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["records"] == 24
    model = StepModel.load(out)
    assert model.training["dataset"] == "who_and_when:algorithm-generated"
    assert model.training["records"] == 24
    attributor = get_attributor("learned", model_path=str(out))
    record = synthetic_records(1, seed=9)[0]
    attribution = await attributor.attribute(record.trajectory, OPTIONS)
    assert attribution.status is AttributionStatus.OK
    assert attribution.step == record.gold.step


def test_train_command_rejects_unknown_datasets(tmp_path: Path) -> None:
    result = CliRunner().invoke(train_command, ["--dataset", "nope", "--out", str(tmp_path / "m")])
    assert result.exit_code != 0
    assert "unknown dataset spec 'nope'" in result.output


# --- per-framework models ----------------------------------------------------------------


def shifted_record(rng: random.Random, number: int) -> BenchmarkRecord:
    """A framework whose culprit is the agent that acts right after the failing output."""
    record = synthetic_record(rng, number, "shifted")
    steps = record.trajectory.steps
    failing = next(i for i, s in enumerate(steps) if "execution failed" in s.content)
    if failing + 1 >= len(steps):
        return shifted_record(rng, number)
    culprit = failing + 1
    fixer = steps[culprit].model_copy(update={"agent": "Fixer", "kind": StepKind.MESSAGE})
    steps = (*steps[:culprit], fixer, *steps[culprit + 1 :])
    trajectory = record.trajectory.model_copy(update={"steps": steps})
    return BenchmarkRecord("synthetic", "shifted", record.record_id, trajectory,
                           GoldLabel("Fixer", culprit))  # fmt: skip


def model_top(attribution: Attribution) -> int:
    """The step the model's own scores put first, before evidence has its say."""
    probabilities: list[float] = attribution.details["step_probabilities"]
    return probabilities.index(max(probabilities))


def test_each_framework_gets_the_model_that_fits_its_runs(tmp_path: Path) -> None:
    rng = random.Random(4)
    plain = [synthetic_record(rng, i, "plain") for i in range(40)]
    shifted = [shifted_record(rng, i) for i in range(40)]
    options = TrainingOptions(
        grid=(ModelConfig(kind="linear", l2=1.0),), inner_folds=3, auditor=False
    )
    model = tune_and_fit(plain + shifted, cache=FeatureCache(), options=options)
    assert set(model.groups) == {"plain", "shifted"}
    model.save(tmp_path / "grouped.json")
    loaded = StepModel.load(tmp_path / "grouped.json")
    assert set(loaded.groups) == {"plain", "shifted"}
    attributor = LearnedAttributor(loaded)
    fresh = random.Random(99)
    for record in [synthetic_record(fresh, 100 + i, "plain") for i in range(10)] + [
        shifted_record(fresh, 200 + i) for i in range(10)
    ]:
        attribution = attributor.attribute_now(record.trajectory, OPTIONS)
        # The model of the run's framework ranks the culprit first (the synthetic runs'
        # terminal error, which the run ends on, is decisive evidence of its own).
        assert model_top(attribution) == record.gold.step, record.record_id
        assert attribution.details["model_group"] == record.subset
    # A run of a framework the model never saw is scored by the pooled model.
    unknown = synthetic_record(fresh, 300, "elsewhere")
    assert attributor.attribute_now(unknown.trajectory, OPTIONS).details["model_group"] is None


def conversation_record(rng: random.Random, number: int) -> BenchmarkRecord:
    """A shifted run whose user speaks again at the end: a conversation, not a task."""
    record = shifted_record(rng, number)
    steps = record.trajectory.steps
    thanks = Step(index=len(steps), agent="user", kind=StepKind.HUMAN, content="Thanks!")
    trajectory = record.trajectory.model_copy(
        update={"steps": (*steps, thanks), "metadata": {"framework": "help-desk"}}
    )
    return BenchmarkRecord("synthetic", "help-desk", f"talk/{number}", trajectory, record.gold)


def test_conversations_get_a_model_of_their_own_and_leave_the_task_model_alone() -> None:
    rng = random.Random(5)
    plain = [synthetic_record(rng, i, "plain") for i in range(40)]
    talks = [conversation_record(rng, i) for i in range(40)]
    assert is_conversation(talks[0].trajectory) and not is_conversation(plain[0].trajectory)
    options = TrainingOptions(
        grid=(ModelConfig(kind="linear", l2=1.0),), inner_folds=3, auditor=False
    )
    tasks_only = tune_and_fit(plain, cache=FeatureCache(), options=options)
    both = tune_and_fit(plain + talks, cache=FeatureCache(), options=options)
    # The runs handed over once are scored as if no conversation had been trained on.
    assert both.to_dict()["scorer"] == tasks_only.to_dict()["scorer"]
    assert CONVERSATION in both.groups and "help-desk" not in both.groups
    attributor = LearnedAttributor(both)
    fresh = random.Random(98)
    for record in [conversation_record(fresh, 100 + i) for i in range(10)]:
        attribution = attributor.attribute_now(record.trajectory, OPTIONS)
        assert attribution.details["model_group"] == CONVERSATION
        assert model_top(attribution) == record.gold.step, record.record_id
