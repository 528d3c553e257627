"""The `learned` attributor: packaged model, valid attributions on real runs, training,
export fidelity, cross-validation folds that never score what they trained on."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from faultfinder.attributors.base import AttributeOptions, available_attributors, get_attributor
from faultfinder.attributors.learned import (
    AgentRule,
    LearnedAttributor,
    LinearScorer,
    MeanScorer,
    ModelFormatError,
    RegressionTree,
    StepModel,
    TreeEnsembleScorer,
    answerable_agents,
    blameable,
    blameable_agents,
    default_model,
    softmax,
)
from faultfinder.attributors.learned.features import FEATURE_LABELS, feature_names, step_features
from faultfinder.attributors.learned.training import (
    TEMPERATURES,
    FeatureCache,
    ModelConfig,
    RunMatrix,
    TrainingOptions,
    batch_scores,
    beats_by_one_standard_error,
    choose_temperature,
    fit_scorer,
    stratified_folds,
    task_key,
    tune_and_fit,
)
from faultfinder.attributors.model import (
    AttributionStatus,
    Step,
    StepKind,
    Trajectory,
    validate_against,
)
from faultfinder.benchmarks.cv import CVSettings, FoldOutcome, cross_validate, fold_plan
from faultfinder.benchmarks.datasets import (
    BenchmarkRecord,
    GoldLabel,
    load_dataset,
)
from faultfinder.benchmarks.train import train_command

OPTIONS = AttributeOptions()


# --- synthetic labelled runs: the culprit is the code whose terminal output failed ----


def synthetic_history(rng: random.Random) -> tuple[list[dict[str, str]], int]:
    n = rng.randint(5, 10)
    culprit = rng.randrange(0, n - 1, 2)
    history = []
    for i in range(n):
        if i == culprit:
            history.append(
                {
                    "name": "Coder",
                    "role": "assistant",
                    "content": "```python\nprint(load('data.csv'))\n```",
                }
            )
        elif i == culprit + 1:
            history.append(
                {
                    "name": "Computer_terminal",
                    "role": "user",
                    "content": "exitcode: 1 (execution failed)\nTraceback (most recent "
                    "call last):\nKeyError: 'rows'",
                }
            )
        elif i % 2:
            history.append(
                {
                    "name": "Computer_terminal",
                    "role": "user",
                    "content": "exitcode: 0 (execution succeeded)\nCode output: done",
                }
            )
        else:
            history.append(
                {
                    "name": rng.choice(["Planner", "Checker", "Coder"]),
                    "role": "assistant",
                    "content": f"Step {i}: looks fine to me.",
                }
            )
    return history, culprit  # fmt: skip


def synthetic_record(rng: random.Random, number: int, subset: str) -> BenchmarkRecord:
    history, culprit = synthetic_history(rng)
    steps = tuple(
        Step(
            index=i,
            agent=entry["name"],
            kind=StepKind.TOOL if entry["name"] == "Computer_terminal" else StepKind.MESSAGE,
            content=entry["content"],
        )
        for i, entry in enumerate(history)
    )
    trajectory = Trajectory(
        run_id=f"synthetic/{subset}/{number}", task="Count the rows.", ground_truth="7",
        steps=steps, metadata={"framework": subset},
    )  # fmt: skip
    return BenchmarkRecord(
        "synthetic", subset, f"{subset}/{number}", trajectory, GoldLabel("Coder", culprit)
    )


def synthetic_records(count: int, seed: int = 0) -> list[BenchmarkRecord]:
    rng = random.Random(seed)
    return [synthetic_record(rng, i, ("small", "large")[i % 2]) for i in range(count)]


# --- the packaged model on real runs --------------------------------------------------


def test_learned_is_registered_and_uses_the_packaged_model() -> None:
    assert "learned" in available_attributors()
    attributor = get_attributor("learned")
    assert isinstance(attributor, LearnedAttributor)
    assert attributor.model is default_model()
    assert attributor.model.features == feature_names()
    assert attributor.model.conformal is not None
    assert attributor.model.auditor is not None and attributor.model.auditor.prefix_only


async def test_valid_attributions_on_real_runs_including_the_longest(
    who_and_when: list[BenchmarkRecord],
) -> None:
    by_subset: dict[str, list[BenchmarkRecord]] = {}
    for record in who_and_when:
        by_subset.setdefault(record.subset, []).append(record)
    longest = max(who_and_when, key=lambda r: len(r.trajectory))
    assert len(longest.trajectory) >= 130
    chosen = by_subset["algorithm-generated"][:4] + by_subset["hand-crafted"][:4] + [longest]
    attributor = get_attributor("learned")
    for record in chosen:
        trajectory = record.trajectory
        result = await attributor.attribute(trajectory, OPTIONS)
        assert result.status is AttributionStatus.OK, result.failure_reason
        assert validate_against(result, trajectory) is None
        assert result.llm_calls == 0 and result.method == "learned"
        assert result.used_ground_truth
        scores = [c.score for c in result.candidates]
        assert scores == sorted(scores, reverse=True)
        assert result.candidates[0].step == result.step
        mass = result.details["agent_mass"]
        if result.details["agent_rule"] == AgentRule.TOP_STEP:
            assert result.agent == answerable_agents(trajectory.steps)[result.step]
        else:
            assert mass[result.agent] == max(mass.values())
        probabilities = result.details["step_probabilities"]
        assert len(probabilities) == len(trajectory)
        assert sum(probabilities) == pytest.approx(1.0, abs=1e-4)
        assert result.confidence == pytest.approx(max(probabilities), abs=1e-4)
        interval = result.prediction_set
        assert interval is not None and interval.alpha == 0.1
        assert 0 <= interval.lo <= interval.hi < len(trajectory)


def test_the_packaged_model_names_the_agent_answering_for_the_blamed_step(
    who_and_when: list[BenchmarkRecord],
) -> None:
    attributor = LearnedAttributor(default_model())
    for record in who_and_when[::3]:
        result = attributor.attribute_now(record.trajectory, OPTIONS)
        assert result.step is not None
        assert result.agent == answerable_agents(record.trajectory.steps)[result.step]


async def test_without_ground_truth_the_answer_cannot_matter(
    who_and_when: list[BenchmarkRecord],
) -> None:
    record = next(r for r in who_and_when if r.subset == "algorithm-generated")
    attributor = LearnedAttributor()
    blind = AttributeOptions(use_ground_truth=False)
    one = await attributor.attribute(record.trajectory, blind)
    other = await attributor.attribute(
        record.trajectory.model_copy(update={"ground_truth": "something else entirely 991"}),
        blind,
    )
    assert not one.used_ground_truth
    assert one.details["step_probabilities"] == other.details["step_probabilities"]


async def test_the_task_giver_and_the_system_prompt_are_never_blamed(datasets_dir: Path) -> None:
    # Who&When Pro's EVA trace opens with a system prompt, a kind of step the Who&When
    # training runs never had; it must not take the blame (it did: "system", step 0).
    pro = {r.record_id: r for r in load_dataset("who_and_when_pro", datasets_dir)}
    eva = pro["eva/lvbench_camel"].trajectory
    assert [s.kind for s in eva.steps[:2]] == [StepKind.SYSTEM, StepKind.HUMAN]
    for record in pro.values():
        trajectory = record.trajectory
        result = await LearnedAttributor().attribute(trajectory, OPTIONS)
        assert result.status is AttributionStatus.OK
        outsiders = [
            i for i, s in enumerate(trajectory.steps) if s.kind in (StepKind.HUMAN, StepKind.SYSTEM)
        ]
        assert outsiders, record.record_id
        assert result.step not in outsiders
        assert all(result.details["step_probabilities"][i] == 0.0 for i in outsiders)
        assert all(c.step not in outsiders for c in result.candidates)
        assert result.agent in trajectory.roster
        assert result.agent not in ("system", "user", "tool")


async def test_a_tool_report_is_answered_for_by_the_agent_that_called_the_tool() -> None:
    # A scorer that blames the step with the error in it picks the terminal's report; the
    # agent answering for it is the one that ran the code, not the terminal.
    names = feature_names()
    weights = [1.0 if name == "error_in_step" else 0.0 for name in names]
    errors = StepModel(
        features=names,
        scorer=LinearScorer(mean=(0.0,) * len(names), scale=(1.0,) * len(names),
                            weights=tuple(weights)),
        agent_rule=AgentRule.TOP_STEP,
    )  # fmt: skip
    trajectory = synthetic_records(1)[0].trajectory
    result = LearnedAttributor(errors).attribute_now(trajectory, OPTIONS)
    assert result.step is not None
    blamed = trajectory.steps[result.step]
    assert blamed.agent == "Computer_terminal" and "Traceback" in blamed.content
    assert result.agent == trajectory.steps[result.step - 1].agent == "Coder"
    assert result.details["agent_mass"].get("Computer_terminal", 0.0) == 0.0
    # The candidates name the answering agent too, and the reason says why the step:
    # the one feature the scorer weighs, in words, with the step's and a typical value.
    assert "Computer_terminal" not in {c.agent for c in result.candidates}
    (evidence,) = result.details["evidence"]
    assert evidence["feature"] == "error_in_step" and evidence["score_drop"] > 0
    assert evidence["value"] > evidence["typical"] == 0.0
    assert "error signal in the step: " in result.reason and evidence["text"] in result.reason


def test_the_agent_mass_does_not_move_with_the_conformal_temperature() -> None:
    # The planner's one step scores 1, the coder's three steps 0. At temperature 1 (where
    # training chose the agent rule) the coder holds more mass (3 / (3 + e) > 1/2); a
    # sharp temperature fitted for the conformal sets must not hand the run to the planner.
    names = feature_names()
    weights = [1.0 if name == "agent_is_first_speaker" else 0.0 for name in names]
    trajectory = Trajectory(
        run_id="mass",
        task="Add the numbers.",
        steps=(
            Step(index=0, agent="Planner", content="Plan: add them."),
            Step(index=1, agent="Coder", content="print(1 + 2)"),
            Step(index=2, agent="Coder", content="The sum is 3."),
            Step(index=3, agent="Coder", content="Done."),
        ),
    )
    answers = {}
    for temperature in (1.0, 0.1):
        model = StepModel(
            features=names,
            scorer=LinearScorer(mean=(0.0,) * len(names), scale=(1.0,) * len(names),
                                weights=tuple(weights)),
            agent_rule=AgentRule.AGENT_MASS,
            temperature=temperature,
        )  # fmt: skip
        result = LearnedAttributor(model).attribute_now(trajectory, OPTIONS)
        answers[temperature] = (result.step, result.agent, result.details["agent_mass"])
        probabilities = result.details["step_probabilities"]
        assert probabilities[0] == pytest.approx(softmax([1.0, 0, 0, 0], temperature)[0], abs=1e-5)
    assert answers[1.0] == answers[0.1]
    step, agent, mass = answers[0.1]
    assert (step, agent) == (0, "Coder")
    assert mass["Coder"] == pytest.approx(3 / (3 + math.e), abs=1e-5)


def test_temperature_is_fitted_by_the_likelihood_of_the_gold_steps() -> None:
    # Gold always scored highest by a clear margin: a sharp temperature is likeliest. Gold
    # at random: the flattest one is.
    rng = random.Random(0)
    sharp: list[tuple[RunMatrix, list[float]]] = []
    flat: list[tuple[RunMatrix, list[float]]] = []
    for i in range(40):
        n = 8
        gold = rng.randrange(n)
        informative = [0.0] * n
        informative[gold] = 3.0
        noise = [rng.gauss(0.0, 3.0) for _ in range(n)]
        for runs, scores in ((sharp, informative), (flat, noise)):
            run = RunMatrix(
                record_id=str(i), subset="s", group=None, rows=np.zeros((n, 1)),
                gold_step=gold, gold_agent="a", agents=("a",) * n, blameable=(True,) * n,
            )  # fmt: skip
            runs.append((run, scores))
    assert choose_temperature([r for r, _ in sharp], [s for _, s in sharp]) == min(TEMPERATURES)
    assert choose_temperature([r for r, _ in flat], [s for _, s in flat]) == max(TEMPERATURES)


def test_the_reason_names_what_sets_the_blamed_step_apart(
    who_and_when: list[BenchmarkRecord],
) -> None:
    model = default_model()
    for record in who_and_when[::23]:
        result = LearnedAttributor(model).attribute_now(record.trajectory, OPTIONS)
        evidence = result.details["evidence"]
        assert 1 <= len(evidence) <= 3, record.record_id
        drops = [e["score_drop"] for e in evidence]
        assert drops == sorted(drops, reverse=True) and drops[-1] > 0
        assert len({e["text"] for e in evidence}) == len(evidence)
        for item in evidence:
            assert item["feature"] in FEATURE_LABELS and item["text"] in result.reason
            assert item["value"] != item["typical"]


def test_every_feature_has_a_label_a_reader_can_follow() -> None:
    assert set(FEATURE_LABELS) == set(feature_names())
    assert {shown for _, shown in FEATURE_LABELS.values()} <= {
        "flag", "int", "log1p", "share", "strength", "ratio",
    }  # fmt: skip


def test_masked_softmax_and_the_blameable_steps() -> None:
    assert softmax([1.0, 2.0, 3.0], mask=[True, False, True]) == pytest.approx(
        [*softmax([1.0, 3.0])[:1], 0.0, softmax([1.0, 3.0])[1]]
    )
    with pytest.raises(ValueError, match="2 entries for 3 scores"):
        softmax([1.0, 2.0, 3.0], mask=[True, False])
    with pytest.raises(ValueError, match="keeps no step"):
        softmax([1.0], mask=[False])
    human = Step(index=0, agent="user", kind=StepKind.HUMAN, content="Count the rows.")
    system = Step(index=1, agent="system", kind=StepKind.SYSTEM, content="Be careful.")
    coder = Step(index=2, agent="Coder", content="print(1)")
    terminal = Step(index=3, agent="Computer_terminal", kind=StepKind.TOOL, content="1")
    assert blameable([human, system, coder, terminal]) == [False, False, True, True]
    # a run with nothing but the task and a system prompt still has a candidate
    assert blameable([human, system]) == [True, True]
    assert answerable_agents([terminal, human, coder, terminal, human]) == [
        "Computer_terminal", "user", "Coder", "Coder", "Coder",
    ]  # fmt: skip
    # A tool call recorded under its caller's name (an agent acting in the run) is the
    # caller's own; under a name that never acts, it answers to the agent before it.
    handoff = Step(index=0, agent="Planner", kind=StepKind.HANDOFF, content="Coder: count.")
    coders_call = Step(index=1, agent="Coder", kind=StepKind.TOOL, content="1")
    assert answerable_agents([handoff, coders_call, coder]) == ["Planner", "Coder", "Coder"]
    assert answerable_agents([handoff, coders_call]) == ["Planner", "Planner"]
    # Who may be named: the agents answering for blameable steps, then the declared team.
    run = Trajectory(run_id="r", steps=tuple(
        s.model_copy(update={"index": i}) for i, s in enumerate([human, system, coder, terminal])
    ))  # fmt: skip
    assert blameable_agents(run) == ("Coder",)
    assert run.declared_roster == ()
    declared = run.model_copy(update={"metadata": {"roster": ["Planner", "Coder"]}})
    assert blameable_agents(declared) == ("Coder", "Planner")
    assert declared.roster == declared.declared_roster == ("Planner", "Coder")


async def test_empty_trajectory_fails_with_a_reason() -> None:
    result = await LearnedAttributor().attribute(Trajectory(run_id="empty"), OPTIONS)
    assert result.status is AttributionStatus.FAILED
    assert "no steps" in (result.failure_reason or "")


# --- the model file ---------------------------------------------------------------------


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


# --- training -------------------------------------------------------------------------


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
        assert attribution.step == record.gold.step, record.record_id
        assert attribution.details["model_group"] == record.subset
    # A run of a framework the model never saw is scored by the pooled model.
    unknown = synthetic_record(fresh, 300, "elsewhere")
    assert attributor.attribute_now(unknown.trajectory, OPTIONS).details["model_group"] is None


def test_a_bad_group_model_names_the_group(tmp_path: Path) -> None:
    data = default_model().to_dict()
    data["groups"] = {"ag2": {"format": "something/else"}}
    path = tmp_path / "grouped.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ModelFormatError, match=r"group 'ag2'.*format"):
        StepModel.load(path)
