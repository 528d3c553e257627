"""Train the `learned` step scorer: fit, choose hyper-parameters by inner CV, export JSON.

`faultfinder train --dataset who_and_when --out model.json` writes a `StepModel`
artifact (with conformal calibration and the auditor's prefix-only model) that the
pure-Python `learned` attributor loads. numpy, scipy and lightgbm are needed here only.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from faultfinder.attributors.conformal import CalibrationExample, calibrate
from faultfinder.attributors.features import feature_names, step_features
from faultfinder.attributors.learned import (
    AgentRule,
    LinearScorer,
    RegressionTree,
    Scorer,
    StepModel,
    TreeEnsembleScorer,
    answerable_agents,
    blameable,
    softmax,
)
from faultfinder.attributors.model import Trajectory, normalise_agent
from faultfinder.benchmarks.datasets import (
    DATASET_SPECS,
    DATASETS_DIR_ENV,
    BenchmarkRecord,
    DatasetError,
    load_dataset,
    resolve_datasets_dir,
)

if TYPE_CHECKING:
    import numpy as np

TRAINING_EXTRA_HINT = "training needs numpy, scipy and lightgbm (pip install 'faultfinder[train]')"

__all__ = [
    "DEFAULT_GRID",
    "FOLDS_BY",
    "FeatureCache",
    "ModelConfig",
    "RunMatrix",
    "batch_scores",
    "choose_alarm_threshold",
    "choose_temperature",
    "first_alarm",
    "fit_model",
    "fit_scorer",
    "out_of_fold_scores",
    "record_folds",
    "require_training_packages",
    "stratified_folds",
    "task_key",
    "train_command",
    "tune_and_fit",
]


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of one candidate model."""

    kind: str = "trees"
    """`trees` (LightGBM, listwise cross-entropy over a run's steps) or `linear`
    (conditional logit: softmax over a run's steps)."""
    n_trees: int = 150
    learning_rate: float = 0.05
    num_leaves: int = 7
    min_child_samples: int = 10
    feature_fraction: float = 0.8
    l2: float = 1.0
    """L2 penalty: on leaf values (trees) or on standardised weights (linear)."""

    def label(self) -> str:
        if self.kind == "linear":
            return f"linear(l2={self.l2:g})"
        return (
            f"trees(n={self.n_trees},lr={self.learning_rate:g},leaves={self.num_leaves},"
            f"min_child={self.min_child_samples})"
        )


DEFAULT_GRID: tuple[ModelConfig, ...] = (
    ModelConfig(kind="linear", l2=1.0),
    ModelConfig(kind="linear", l2=10.0),
    ModelConfig(kind="trees", n_trees=100, num_leaves=4, min_child_samples=10),
    ModelConfig(kind="trees", n_trees=100, learning_rate=0.1, num_leaves=7, min_child_samples=10),
)
"""Candidates compared by inner cross-validation on the training records only."""


def require_training_packages() -> None:
    """Fail with a clear message when the training extra is not installed."""
    import importlib.util

    missing = [
        name for name in ("numpy", "scipy", "lightgbm") if importlib.util.find_spec(name) is None
    ]
    if missing:
        raise click.ClickException(f"{TRAINING_EXTRA_HINT}; missing: {', '.join(missing)}")


# --- data ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunMatrix:
    """One labelled run as model input: feature rows, gold step and agent, step owners."""

    record_id: str
    subset: str
    group: str | None
    rows: np.ndarray
    gold_step: int
    gold_agent: str
    agents: tuple[str, ...]
    """The agent that answers for each step (`learned.answerable_agents`)."""
    blameable: tuple[bool, ...]
    """Steps the attributor may blame (`learned.blameable`); the others get no probability."""
    task: str = ""
    """`task_key` of the record: runs of one task share a fold in inner CV."""


class FeatureCache:
    """Feature matrices per (record, ground-truth use, prefix-only), computed once."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, bool, bool], RunMatrix] = {}

    def matrix(
        self, record: BenchmarkRecord, *, use_ground_truth: bool, prefix_only: bool
    ) -> RunMatrix:
        import numpy as np

        key = (record.record_id, use_ground_truth, prefix_only)
        if key not in self._cache:
            trajectory = record.trajectory
            rows = step_features(
                trajectory,
                use_ground_truth=use_ground_truth and trajectory.ground_truth is not None,
                prefix_only=prefix_only,
            )
            framework = trajectory.metadata.get("framework")
            self._cache[key] = RunMatrix(
                record_id=record.record_id,
                subset=record.subset,
                group=framework if isinstance(framework, str) else None,
                rows=np.asarray(rows, dtype=np.float64),
                gold_step=record.gold.step,
                gold_agent=record.gold.agent,
                agents=tuple(answerable_agents(trajectory.steps)),
                blameable=tuple(blameable(trajectory.steps)),
                task=task_key(trajectory),
            )
        return self._cache[key]

    def matrices(
        self, records: Sequence[BenchmarkRecord], *, use_ground_truth: bool, prefix_only: bool
    ) -> list[RunMatrix]:
        return [
            self.matrix(r, use_ground_truth=use_ground_truth, prefix_only=prefix_only)
            for r in records
        ]


def stratified_folds(
    subsets: Sequence[str], k: int, seed: int, tasks: Sequence[str] | None = None
) -> list[list[int]]:
    """Indices 0..len(subsets)-1 split into `k` disjoint folds, each subset spread evenly.

    Within each subset the order is shuffled with `seed` and dealt round-robin, starting
    where the previous subset stopped so that fold sizes differ by at most one.

    `tasks` (one key per record, see `task_key`) keeps records of the same task in one
    fold: Who&When asks 42 of its questions in both subsets, and a model must not be
    scored on a question whose other run it trained on. A record whose task already has
    a fold joins it; every other record goes to the fold with the fewest records of its
    subset, looking from the round-robin position on, and within a subset the records of
    repeated tasks are dealt first so that they spread evenly too. A task with more
    records than a fold holds (k folds of n records: more than n // k) is a template,
    not a repeated question, and its records are dealt one by one. Without repeated
    tasks the folds are exactly the round-robin ones.
    """
    if k < 2:
        raise ValueError(f"need at least 2 folds, got {k}")
    if k > len(subsets):
        raise ValueError(f"{k} folds need at least {k} records, got {len(subsets)}")
    if tasks is not None and len(tasks) != len(subsets):
        raise ValueError(f"{len(tasks)} task keys for {len(subsets)} records")
    rng = random.Random(seed)
    folds: list[list[int]] = [[] for _ in range(k)]
    by_subset: dict[str, list[int]] = {}
    for index, subset in enumerate(subsets):
        by_subset.setdefault(subset, []).append(index)
    # The task each record shares a fold with, if any. A task with more runs than a fold
    # holds is a template (one prompt, many inputs), not a question asked twice: its runs
    # are dealt like distinct tasks.
    tied: list[str | None] = [None] * len(subsets)
    if tasks is not None:
        counts = Counter(tasks)
        tied = [task if 1 < counts[task] <= len(subsets) // k else None for task in tasks]
    fold_of_task: dict[str, int] = {}
    cursor = 0
    for subset in sorted(by_subset):
        members = by_subset[subset]
        rng.shuffle(members)
        # Deal the repeated tasks first, so that they too spread evenly over the folds (and
        # their later runs, which must follow, do not pile up in one fold); stable, so
        # without repeated tasks the order is the shuffle's.
        members.sort(key=lambda i: tied[i] is None)
        in_subset = [0] * k
        for index in members:
            task = tied[index]
            if task is not None and task in fold_of_task:
                fold = fold_of_task[task]
            else:
                fewest = min(in_subset)
                fold = next(
                    f for f in ((cursor + j) % k for j in range(k)) if in_subset[f] == fewest
                )
                cursor = fold + 1
                if task is not None:
                    fold_of_task[task] = fold
            folds[fold].append(index)
            in_subset[fold] += 1
    return [sorted(fold) for fold in folds]


def task_key(trajectory: Trajectory) -> str:
    """What makes two records the same task for fold splitting: the task text, with
    case and runs of whitespace ignored."""
    return " ".join(trajectory.task.split()).casefold()


FOLDS_BY = "task"
"""What `record_folds` keeps together; recorded where out-of-fold results are stored."""


def record_folds(records: Sequence[BenchmarkRecord], k: int, seed: int) -> list[list[int]]:
    """The k folds (record positions) of labelled records: stratified by subset, the runs
    of one task (`task_key`) together. The one split of the outer CV and the pre-filter."""
    return stratified_folds(
        [record.subset for record in records],
        k,
        seed,
        [task_key(record.trajectory) for record in records],
    )


# --- fitting ------------------------------------------------------------------------


def _fit_linear(runs: Sequence[RunMatrix], config: ModelConfig) -> LinearScorer:
    import numpy as np
    from scipy.optimize import minimize

    stacked = np.vstack([run.rows for run in runs])
    mean = stacked.mean(axis=0)
    scale = stacked.std(axis=0)
    scale[scale < 1e-9] = 1.0
    standardised = [(run.rows - mean) / scale for run in runs]
    golds = [run.gold_step for run in runs]
    width = stacked.shape[1]

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        total = 0.5 * config.l2 * float(w @ w)
        grad = config.l2 * w
        for x, g in zip(standardised, golds, strict=True):
            s = x @ w
            top = s.max()
            log_norm = top + math.log(float(np.exp(s - top).sum()))
            total += log_norm - float(s[g])
            grad = grad + x.T @ np.exp(s - log_norm) - x[g]
        return total, grad

    result = minimize(loss, np.zeros(width), jac=True, method="L-BFGS-B")
    return LinearScorer(
        mean=tuple(float(v) for v in mean),
        scale=tuple(float(v) for v in scale),
        weights=tuple(float(v) for v in result.x),
        bias=0.0,
    )


def _tree_from_lightgbm(structure: dict[str, Any]) -> RegressionTree:
    feature: list[int] = []
    threshold: list[float] = []
    left: list[int] = []
    right: list[int] = []
    value: list[float] = []

    def visit(node: dict[str, Any]) -> int:
        position = len(feature)
        feature.append(-1)
        threshold.append(0.0)
        left.append(-1)
        right.append(-1)
        value.append(0.0)
        if "leaf_value" in node:
            value[position] = float(node["leaf_value"])
            return position
        if node.get("decision_type") != "<=":
            raise ValueError(f"unsupported split {node.get('decision_type')!r}")
        feature[position] = int(node["split_feature"])
        threshold[position] = float(node["threshold"])
        left[position] = visit(node["left_child"])
        right[position] = visit(node["right_child"])
        return position

    visit(structure)
    return RegressionTree(tuple(feature), tuple(threshold), tuple(left), tuple(right), tuple(value))


def _fit_trees(runs: Sequence[RunMatrix], config: ModelConfig, seed: int) -> TreeEnsembleScorer:
    import lightgbm
    import numpy as np

    x = np.vstack([run.rows for run in runs])
    y = np.concatenate(
        [(np.arange(len(run.rows)) == run.gold_step).astype(np.float64) for run in runs]
    )
    dataset = lightgbm.Dataset(x, label=y, group=[len(run.rows) for run in runs])
    params = {
        "objective": "rank_xendcg",
        "learning_rate": config.learning_rate,
        "num_leaves": config.num_leaves,
        "min_child_samples": config.min_child_samples,
        "feature_fraction": config.feature_fraction,
        "lambda_l2": config.l2,
        "seed": seed,
        "deterministic": True,
        "num_threads": 1,
        "verbosity": -1,
    }
    booster = lightgbm.train(params, dataset, num_boost_round=config.n_trees)
    dump = booster.dump_model()
    scorer = TreeEnsembleScorer(
        tuple(_tree_from_lightgbm(t["tree_structure"]) for t in dump["tree_info"])
    )
    # The exported trees must reproduce LightGBM's own raw scores.
    sample = x[: min(len(x), 200)]
    expected = booster.predict(sample, raw_score=True)
    actual = np.array([scorer.score(row) for row in sample.tolist()])
    if not np.allclose(expected, actual, atol=1e-6):
        raise RuntimeError("exported tree ensemble disagrees with LightGBM's predictions")
    return scorer


def fit_scorer(runs: Sequence[RunMatrix], config: ModelConfig, seed: int = 0) -> Scorer:
    """Fit one scorer on labelled runs."""
    if not runs:
        raise ValueError("no runs to train on")
    if config.kind == "linear":
        return _fit_linear(runs, config)
    if config.kind == "trees":
        return _fit_trees(runs, config, seed)
    raise ValueError(f"unknown model kind {config.kind!r}")


def batch_scores(scorer: Scorer, rows: np.ndarray) -> np.ndarray:
    """The scorer's scores for many rows at once (vectorised; same values as `score`)."""
    import numpy as np

    if isinstance(scorer, LinearScorer):
        weights = np.asarray(scorer.weights) / np.asarray(scorer.scale)
        linear: np.ndarray = (rows - np.asarray(scorer.mean)) @ weights + scorer.bias
        return linear
    total = np.full(len(rows), scorer.base)
    positions = np.arange(len(rows))
    for tree in scorer.trees:
        feature = np.asarray(tree.feature)
        threshold = np.asarray(tree.threshold)
        left, right = np.asarray(tree.left), np.asarray(tree.right)
        node = np.zeros(len(rows), dtype=np.int64)
        while True:
            inner = feature[node] >= 0
            if not inner.any():
                break
            split = np.where(inner, feature[node], 0)
            go_left = rows[positions, split] <= threshold[node]
            node = np.where(inner, np.where(go_left, left[node], right[node]), node)
        total += np.asarray(tree.value)[node]
    return total


def _scores(scorer: Scorer, run: RunMatrix) -> list[float]:
    return [float(v) for v in batch_scores(scorer, run.rows)]


def out_of_fold_scores(
    runs: Sequence[RunMatrix], config: ModelConfig, k: int, seed: int
) -> list[list[float]]:
    """Each run's step scores from a model fitted on the other folds only."""
    folds = stratified_folds([run.subset for run in runs], k, seed, [run.task for run in runs])
    scores: list[list[float]] = [[] for _ in runs]
    for fold in folds:
        held_out = set(fold)
        scorer = fit_scorer([r for i, r in enumerate(runs) if i not in held_out], config, seed)
        for i in fold:
            scores[i] = _scores(scorer, runs[i])
    return scores


def predicted_agent(run: RunMatrix, probabilities: Sequence[float], rule: str) -> str:
    if rule == AgentRule.AGENT_MASS:
        mass: dict[str, float] = {}
        for agent, p in zip(run.agents, probabilities, strict=True):
            mass[agent] = mass.get(agent, 0.0) + p
        return max(mass, key=lambda name: mass[name])
    top = max(range(len(probabilities)), key=lambda i: (probabilities[i], -i))
    return run.agents[top]


def _utility(runs: Sequence[RunMatrix], scores: Sequence[Sequence[float]], rule: str) -> float:
    """Mean of step and agent accuracy: the inner-CV selection criterion."""
    total = 0.0
    for run, s in zip(runs, scores, strict=True):
        p = softmax(s, mask=run.blameable)
        top = max(range(len(p)), key=lambda i: (p[i], -i))
        total += 0.5 * (top == run.gold_step)
        agent = predicted_agent(run, p, rule)
        total += 0.5 * (normalise_agent(agent) == normalise_agent(run.gold_agent))
    return total / len(runs)


TEMPERATURES: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0)
"""Softmax temperatures tried for the conformal step distribution."""


def choose_temperature(runs: Sequence[RunMatrix], scores: Sequence[Sequence[float]]) -> float:
    """The temperature under which the gold steps are likeliest (ties: 1.0 first).

    Temperature scaling by likelihood, not by how many steps the calibrated sets drop:
    the conformal scores are calibrated on these same runs, and picking, among several
    temperatures, the one whose calibration quantiles happen to drop the most steps
    leaves sets that cover less than 1 − α on new runs (measured on Who&When, task-grouped
    5-fold CV over 10 seeds: 88.7 % at α = 0.1 that way, 90.1 % by likelihood). Only the
    shape of the distribution changes (the top step does not), so the step answer is
    unaffected.
    """
    best, best_nll = 1.0, math.inf
    for temperature in sorted(TEMPERATURES, key=lambda t: abs(math.log(t))):
        nll = 0.0
        for run, s in zip(runs, scores, strict=True):
            p = softmax(s, temperature, run.blameable)[run.gold_step]
            nll -= math.log(max(p, 1e-300))
        if nll < best_nll - 1e-9:
            best, best_nll = temperature, nll
    return best


# --- the auditor's threshold ---------------------------------------------------------


def first_alarm(
    scores: Sequence[float], threshold: float, mask: Sequence[bool] | None = None
) -> int | None:
    """The first step whose prefix score exceeds `threshold` (among the steps `mask`
    keeps, see `learned.blameable`), or None."""
    return next(
        (i for i, s in enumerate(scores) if s > threshold and (mask is None or mask[i])), None
    )


def choose_alarm_threshold(runs: Sequence[RunMatrix], scores: Sequence[Sequence[float]]) -> float:
    """The threshold whose first alarms hit the gold step in the most runs (ties: higher)."""
    candidates = sorted({round(s, 9) for run_scores in scores for s in run_scores})
    best, best_hits = math.inf, -1
    # Walk down from the highest threshold; evaluate a spread of candidates for speed.
    stride = max(1, len(candidates) // 400)
    for threshold in reversed(candidates[::stride]):
        threshold -= 1e-9
        hits = sum(
            first_alarm(s, threshold, run.blameable) == run.gold_step
            for run, s in zip(runs, scores, strict=True)
        )
        if hits > best_hits:
            best, best_hits = threshold, hits
    return best


# --- the whole model -----------------------------------------------------------------


GROUP_MIN_RECORDS = 20
"""A framework gets its own model candidates only with at least this many training runs."""


@dataclass(frozen=True)
class _Choice:
    """One candidate for a set of runs: where it trains, its config and agent rule."""

    utility: float
    config: ModelConfig
    rule: str
    scores: dict[int, list[float]]
    """Inner out-of-fold scores by run position (of the runs it was judged on)."""
    own_group: bool = False
    """Trained on the group's runs only (else on all runs)."""

    def label(self) -> str:
        where = "group-only" if self.own_group else "pooled"
        return f"{where} {self.config.label()} / {self.rule}"


def _best(
    runs: Sequence[RunMatrix],
    positions: Sequence[int],
    candidates: Sequence[tuple[ModelConfig, bool, dict[int, list[float]]]],
) -> tuple[_Choice, dict[str, float]]:
    """The candidate (config × agent rule) with the best inner-CV utility on `positions`.

    Earlier candidates win ties, so pooled configs are preferred to group-only ones.
    """
    chosen: _Choice | None = None
    report: dict[str, float] = {}
    judged = [runs[i] for i in positions]
    for config, own_group, scores in candidates:
        subset = [scores[i] for i in positions]
        for rule in AgentRule.ALL:
            utility = _utility(judged, subset, rule)
            choice = _Choice(utility, config, rule, scores, own_group)
            report[choice.label()] = utility
            if chosen is None or utility > chosen.utility + 1e-12:
                chosen = choice
    assert chosen is not None
    return chosen, report


def _scores_by_position(
    runs: Sequence[RunMatrix], positions: Sequence[int], config: ModelConfig, k: int, seed: int
) -> dict[int, list[float]]:
    scores = out_of_fold_scores([runs[i] for i in positions], config, k, seed)
    return dict(zip(positions, scores, strict=True))


def tune_and_fit(
    records: Sequence[BenchmarkRecord],
    *,
    cache: FeatureCache,
    grid: Sequence[ModelConfig] = DEFAULT_GRID,
    inner_folds: int = 3,
    seed: int = 0,
    use_ground_truth: bool = True,
    auditor: bool = True,
    per_group: bool = True,
    on_step: Callable[[str], None] | None = None,
) -> StepModel:
    """Choose the model config and agent rule by inner CV on `records`, then fit on all of them.

    With `per_group`, each framework with enough runs also gets candidates trained on
    its runs only; the best of the pooled and group-only candidates on that framework's
    runs (inner CV) becomes its group model. The inner out-of-fold scores of the chosen
    candidates also pick the softmax temperatures and calibrate the conformal sets, and
    the auditor's prefix-only model gets its alarm threshold the same way. Nothing
    outside `records` is looked at.
    """
    runs = cache.matrices(records, use_ground_truth=use_ground_truth, prefix_only=False)
    everyone = list(range(len(runs)))
    pooled: list[tuple[ModelConfig, bool, dict[int, list[float]]]] = []
    for config in grid:
        pooled.append(
            (config, False, _scores_by_position(runs, everyone, config, inner_folds, seed))
        )
        if on_step is not None:
            on_step(config.label())
    best, pooled_report = _best(runs, everyone, pooled)
    report: dict[str, dict[str, float]] = {"*": pooled_report}

    members: dict[str, list[int]] = {}
    for i, run in enumerate(runs):
        if run.group is not None:
            members.setdefault(run.group, []).append(i)
    # Frameworks with enough training runs get choices of their own (model, alarm threshold).
    own_groups = {
        group: positions
        for group, positions in sorted(members.items())
        if per_group and len(positions) >= max(GROUP_MIN_RECORDS, 2 * inner_folds)
    }
    group_choices: dict[str, _Choice] = {}
    for group, positions in own_groups.items():
        candidates = list(pooled)
        for config in grid:
            own = _scores_by_position(runs, positions, config, inner_folds, seed)
            candidates.append((config, True, own))
            if on_step is not None:
                on_step(f"{group}: {config.label()}")
        choice, report[group] = _best(runs, positions, candidates)
        group_choices[group] = choice

    def chosen_for(run: RunMatrix) -> _Choice:
        return group_choices.get(run.group or "", best)

    scorer = fit_scorer(runs, best.config, seed)
    temperature = choose_temperature(runs, [best.scores[i] for i in everyone])
    groups: dict[str, StepModel] = {}
    temperatures: dict[str, float] = {}
    for group, choice in group_choices.items():
        positions = members[group]
        group_runs = [runs[i] for i in positions]
        temperatures[group] = choose_temperature(group_runs, [choice.scores[i] for i in positions])
        if not choice.own_group and choice.config == best.config and choice.rule == best.rule:
            if temperatures[group] == temperature:
                continue
            group_scorer: Scorer = scorer
        else:
            group_scorer = fit_scorer(group_runs if choice.own_group else runs, choice.config, seed)
        groups[group] = StepModel(
            features=feature_names(),
            scorer=group_scorer,
            agent_rule=choice.rule,
            temperature=temperatures[group],
            training={"config": asdict(choice.config), "choice": choice.label()},
        )
    conformal = calibrate(
        CalibrationExample(
            softmax(
                chosen_for(run).scores[i],
                temperatures.get(run.group or "", temperature),
                run.blameable,
            ),
            run.gold_step,
            run.group,
        )
        for i, run in enumerate(runs)
    )
    audit_model = None
    if auditor:
        prefix_runs = cache.matrices(records, use_ground_truth=use_ground_truth, prefix_only=True)
        prefix_scores = out_of_fold_scores(prefix_runs, best.config, inner_folds, seed)
        threshold = choose_alarm_threshold(prefix_runs, prefix_scores)
        # Per framework (as the conformal sets): the first alarm's hit rate and the
        # share of runs that alarm differ widely between frameworks, so one pooled
        # threshold over-alarms on some.
        thresholds = {
            group: choose_alarm_threshold(
                [prefix_runs[i] for i in positions], [prefix_scores[i] for i in positions]
            )
            for group, positions in own_groups.items()
        }
        audit_model = StepModel(
            features=feature_names(prefix_only=True),
            scorer=fit_scorer(prefix_runs, best.config, seed),
            prefix_only=True,
            alarm_threshold=threshold,
            alarm_thresholds=thresholds,
            training={"config": asdict(best.config)},
        )
    return StepModel(
        features=feature_names(),
        scorer=scorer,
        agent_rule=best.rule,
        temperature=temperature,
        conformal=conformal,
        auditor=audit_model,
        groups=groups,
        training={
            "records": len(records),
            "seed": seed,
            "use_ground_truth": use_ground_truth,
            "inner_folds": inner_folds,
            "config": asdict(best.config),
            "group_choices": {group: c.label() for group, c in group_choices.items()},
            "inner_cv_utility": report,
        },
    )


def fit_model(
    records: Sequence[BenchmarkRecord],
    config: ModelConfig,
    *,
    cache: FeatureCache,
    seed: int = 0,
    use_ground_truth: bool = True,
    agent_rule: str = AgentRule.TOP_STEP,
) -> StepModel:
    """Fit one fixed config on all `records` (no tuning, no calibration)."""
    runs = cache.matrices(records, use_ground_truth=use_ground_truth, prefix_only=False)
    return StepModel(
        features=feature_names(),
        scorer=fit_scorer(runs, config, seed),
        agent_rule=agent_rule,
        training={"records": len(records), "seed": seed, "config": asdict(config)},
    )


# --- command line ---------------------------------------------------------------------


@click.command(name="train")
@click.option(
    "--dataset",
    default="who_and_when",
    show_default=True,
    help=f"Labelled records to train on: {', '.join(DATASET_SPECS)}.",
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the model JSON.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for folds and trees.")
@click.option(
    "--with-ground-truth/--without-ground-truth",
    default=True,
    show_default=True,
    help="Whether the model's features may use the task's correct answer.",
)
@click.option(
    "--datasets-dir",
    envvar=DATASETS_DIR_ENV,
    type=click.Path(file_okay=False, path_type=Path),
    help=f"Root of the datasets (${DATASETS_DIR_ENV}; default ../shared/datasets).",
)
def train_command(
    dataset: str,
    out: Path,
    seed: int,
    with_ground_truth: bool,
    datasets_dir: Path | None,
) -> None:
    """Train the `learned` attributor's step model and write it as JSON."""
    require_training_packages()
    if dataset.strip().lower() not in DATASET_SPECS:
        raise click.BadParameter(
            f"unknown dataset {dataset!r}; valid: {', '.join(DATASET_SPECS)}",
            param_hint="'--dataset'",
        )
    root = resolve_datasets_dir(datasets_dir)
    try:
        records = list(load_dataset(dataset, root))
    except DatasetError as exc:
        raise click.ClickException(str(exc)) from None
    if len(records) < 6:
        raise click.ClickException(f"{dataset!r} under {root} has too few records to train on")
    stderr = Console(stderr=True)
    with stderr.status(f"tuning on {len(records)} records of {dataset}") as status:
        model = tune_and_fit(
            records,
            cache=FeatureCache(),
            seed=seed,
            use_ground_truth=with_ground_truth,
            on_step=lambda label: status.update(f"tuning on {dataset}: tried {label}"),
        )
    model = replace(
        model,
        training={
            **model.training,
            "dataset": dataset,
            "trained_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out)
    chosen = model.training.get("config", {})
    click.echo(
        json.dumps(
            {
                "out": str(out),
                "records": len(records),
                "config": chosen,
                "agent_rule": model.agent_rule,
            }
        )
    )
