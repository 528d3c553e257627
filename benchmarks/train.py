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
    MeanScorer,
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

    from faultfinder.benchmarks.labelled import LabelledRuns

NO_DATASET = "none"
"""`faultfinder train --dataset none --from-database URL`: the database's labelled runs alone."""

MIN_TRAINING_RECORDS = 6

FROM_DATABASE_HELP = (
    "Also the runs people labelled in this sidecar database (SQLAlchemy async URL, e.g."
    " sqlite+aiosqlite:///faultfinder.db); with --dataset none, those alone."
)

TRAINING_EXTRA_HINT = "training needs numpy, scipy and lightgbm (pip install 'faultfinder[train]')"

__all__ = [
    "DEFAULT_GRID",
    "FOLDS_BY",
    "FeatureCache",
    "ModelConfig",
    "RunMatrix",
    "batch_scores",
    "beats_by_one_standard_error",
    "choose_alarm_threshold",
    "choose_temperature",
    "first_alarm",
    "fit_ensemble",
    "fit_model",
    "fit_scorer",
    "out_of_fold_scores",
    "record_folds",
    "require_training_packages",
    "run_correct",
    "run_utilities",
    "stratified_folds",
    "task_key",
    "train_command",
    "tune_and_fit",
]


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of one candidate model."""

    kind: str = "trees"
    """`trees` (LightGBM boosted trees) or `linear`; both maximise the conditional-logit
    likelihood of the gold step (a softmax over each run's blameable steps)."""
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
"""The members of the ensemble `tune_and_fit` trains: every one is fitted and their
scores averaged (`MeanScorer`), rather than one chosen by inner CV."""


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


def _softmax_objective(
    runs: Sequence[RunMatrix],
) -> Callable[[np.ndarray, Any], tuple[np.ndarray, np.ndarray]]:
    """Gradient and diagonal Hessian of the conditional-logit loss, −Σ log p(gold step),
    with p a softmax over each run's blameable steps: the likelihood the linear scorer
    maximises, so that tree scores too are log-potentials of the step distribution (and
    the members of a `MeanScorer` share one scale)."""
    import numpy as np

    sizes = np.array([len(run.rows) for run in runs])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    gold = starts + np.array([run.gold_step for run in runs])
    kept = np.concatenate([np.asarray(run.blameable, dtype=bool) for run in runs])
    run_of = np.repeat(np.arange(len(runs)), sizes)

    def objective(preds: np.ndarray, _: Any) -> tuple[np.ndarray, np.ndarray]:
        scores = np.where(kept, preds, -np.inf)
        top = np.maximum.reduceat(scores, starts)
        weights = np.where(kept, np.exp(scores - top[run_of]), 0.0)
        p = weights / np.add.reduceat(weights, starts)[run_of]
        grad = p.copy()
        grad[gold] -= 1.0
        # Floored so that leaves of near-certain steps keep a usable curvature.
        hess = np.maximum(p * (1.0 - p), 1e-3)
        return grad, hess

    return objective


def _fit_trees(runs: Sequence[RunMatrix], config: ModelConfig, seed: int) -> TreeEnsembleScorer:
    import lightgbm
    import numpy as np

    x = np.vstack([run.rows for run in runs])
    dataset = lightgbm.Dataset(x, label=np.zeros(len(x)))
    params = {
        "objective": _softmax_objective(runs),
        "learning_rate": config.learning_rate,
        "num_leaves": config.num_leaves,
        "min_child_samples": config.min_child_samples,
        "min_sum_hessian_in_leaf": 1e-3,
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


def fit_scorer(
    runs: Sequence[RunMatrix], config: ModelConfig, seed: int = 0
) -> LinearScorer | TreeEnsembleScorer:
    """Fit one scorer on labelled runs."""
    if not runs:
        raise ValueError("no runs to train on")
    if config.kind == "linear":
        return _fit_linear(runs, config)
    if config.kind == "trees":
        return _fit_trees(runs, config, seed)
    raise ValueError(f"unknown model kind {config.kind!r}")


def fit_ensemble(
    runs: Sequence[RunMatrix], configs: Sequence[ModelConfig], seed: int = 0
) -> Scorer:
    """One scorer per config, averaged (`MeanScorer`); a single config is returned bare."""
    if not configs:
        raise ValueError("no configs to fit")
    members = tuple(fit_scorer(runs, config, seed) for config in configs)
    return members[0] if len(members) == 1 else MeanScorer(members)


def batch_scores(scorer: Scorer, rows: np.ndarray) -> np.ndarray:
    """The scorer's scores for many rows at once (vectorised; same values as `score`)."""
    import numpy as np

    if isinstance(scorer, MeanScorer):
        total_of_members: np.ndarray = sum(
            (batch_scores(member, rows) for member in scorer.members), np.zeros(len(rows))
        )
        return total_of_members / len(scorer.members)
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
    runs: Sequence[RunMatrix],
    configs: ModelConfig | Sequence[ModelConfig],
    k: int,
    seed: int,
) -> list[list[float]]:
    """Each run's step scores from a model (one config, or the ensemble of several: see
    `fit_ensemble`) fitted on the other folds only."""
    members = (configs,) if isinstance(configs, ModelConfig) else tuple(configs)
    folds = stratified_folds([run.subset for run in runs], k, seed, [run.task for run in runs])
    scores: list[list[float]] = [[] for _ in runs]
    for fold in folds:
        held_out = set(fold)
        scorer = fit_ensemble([r for i, r in enumerate(runs) if i not in held_out], members, seed)
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


def run_correct(run: RunMatrix, scores: Sequence[float], rule: str) -> tuple[bool, bool]:
    """Whether the scores' top blameable step, and the agent `rule` names, are the gold ones."""
    p = softmax(scores, mask=run.blameable)
    top = max(range(len(p)), key=lambda i: (p[i], -i))
    agent = predicted_agent(run, p, rule)
    return top == run.gold_step, normalise_agent(agent) == normalise_agent(run.gold_agent)


def run_utilities(
    runs: Sequence[RunMatrix], scores: Sequence[Sequence[float]], rule: str
) -> list[float]:
    """Per run, the mean of step and agent correctness (0, ½ or 1): what training compares."""
    return [0.5 * sum(run_correct(run, s, rule)) for run, s in zip(runs, scores, strict=True)]


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
"""A framework gets choices of its own (a model trained on its runs only, agent rule,
temperature, alarm threshold) only with at least this many training runs."""


@dataclass(frozen=True)
class _Choice:
    """The scorer chosen for a set of runs (pooled or trained on the group's runs only),
    its agent rule and its inner out-of-fold scores."""

    rule: str
    scores: dict[int, list[float]]
    """Inner out-of-fold scores by run position (of the runs it was judged on)."""
    utilities: dict[str, list[float]]
    """Agent rule -> per-run utility (`run_utilities`) on the runs it was judged on."""
    own_group: bool = False
    """Trained on the group's runs only (else on all runs)."""

    @classmethod
    def judge(
        cls,
        runs: Sequence[RunMatrix],
        positions: Sequence[int],
        scores: dict[int, list[float]],
        rules: Sequence[str],
        own_group: bool = False,
    ) -> _Choice:
        """The agent rule of `rules` with the best mean utility on `positions` (ties: the
        first)."""
        judged = [runs[i] for i in positions]
        subset = [scores[i] for i in positions]
        utilities = {rule: run_utilities(judged, subset, rule) for rule in rules}
        rule = max(rules, key=lambda r: (sum(utilities[r]), -rules.index(r)))
        return cls(rule, scores, utilities, own_group)

    @property
    def where(self) -> str:
        return "group-only" if self.own_group else "pooled"

    def label(self) -> str:
        return f"{self.where} ensemble / {self.rule}"

    def report(self) -> dict[str, float]:
        """Mean inner-CV utility per agent rule."""
        return {f"{self.where} / {rule}": sum(u) / len(u) for rule, u in self.utilities.items()}


def beats_by_one_standard_error(gains: Sequence[float]) -> bool:
    """Whether paired per-run gains have a mean above one standard error of that mean.

    A framework's own model replaces the pooled one only then (the one-standard-error
    rule: keep the model backed by more data unless the other is better by more than
    the noise of the comparison). With a few dozen runs per framework, inner-CV
    differences of a few points are within that noise, and choosing by the raw mean
    picks the worse model about as often as the better one.
    """
    n = len(gains)
    if n < 2:
        return False
    mean = sum(gains) / n
    variance = sum((g - mean) ** 2 for g in gains) / (n - 1)
    return mean > math.sqrt(variance / n)


def _scores_by_position(
    runs: Sequence[RunMatrix],
    positions: Sequence[int],
    configs: Sequence[ModelConfig],
    k: int,
    seed: int,
) -> dict[int, list[float]]:
    scores = out_of_fold_scores([runs[i] for i in positions], configs, k, seed)
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
    agent_rules: Sequence[str] = (AgentRule.TOP_STEP,),
    on_step: Callable[[str], None] | None = None,
) -> StepModel:
    """Fit the ensemble of every config in `grid` on `records` and choose, by inner CV
    on `records` only, what remains to choose.

    The scorer is the mean of one model per config (`fit_ensemble`): averaging the
    candidates instead of picking one by inner CV, whose pick on a few hundred runs is
    mostly noise (on Who&When the picked model scored below every candidate it was
    picked from). The inner out-of-fold scores of the ensemble choose the agent rule,
    the softmax temperature (by likelihood) and calibrate the conformal sets. With
    `per_group`, each framework with at least `GROUP_MIN_RECORDS` runs also gets an
    ensemble trained on its runs only, which replaces the pooled one for that framework
    when it is better on that framework's runs by more than one standard error
    (`beats_by_one_standard_error`), and an agent rule, temperature and alarm threshold
    of its own. The auditor's prefix-only ensemble gets its alarm threshold the same
    way. Nothing outside `records` is looked at.
    """
    configs = tuple(grid)
    if not configs:
        raise ValueError("no configs to train")
    runs = cache.matrices(records, use_ground_truth=use_ground_truth, prefix_only=False)
    everyone = list(range(len(runs)))
    step = on_step or (lambda _: None)
    step("pooled ensemble")
    rules = tuple(agent_rules)
    pooled = _Choice.judge(
        runs, everyone, _scores_by_position(runs, everyone, configs, inner_folds, seed), rules
    )
    report: dict[str, dict[str, float]] = {"*": pooled.report()}

    members: dict[str, list[int]] = {}
    for i, run in enumerate(runs):
        if run.group is not None:
            members.setdefault(run.group, []).append(i)
    # Frameworks with enough training runs get choices of their own.
    own_groups = {
        group: positions
        for group, positions in sorted(members.items())
        if per_group and len(positions) >= max(GROUP_MIN_RECORDS, 2 * inner_folds)
    }
    group_choices: dict[str, _Choice] = {}
    for group, positions in own_groups.items():
        step(f"{group}: ensemble on its runs only")
        shared = _Choice.judge(runs, positions, pooled.scores, rules)
        own = _Choice.judge(
            runs,
            positions,
            _scores_by_position(runs, positions, configs, inner_folds, seed),
            rules,
            own_group=True,
        )
        gains = [
            o - p
            for o, p in zip(own.utilities[own.rule], shared.utilities[shared.rule], strict=True)
        ]
        group_choices[group] = own if beats_by_one_standard_error(gains) else shared
        report[group] = {**shared.report(), **own.report()}

    def chosen_for(run: RunMatrix) -> _Choice:
        return group_choices.get(run.group or "", pooled)

    step("fitting the ensemble on every record")
    scorer = fit_ensemble(runs, configs, seed)
    temperature = choose_temperature(runs, [pooled.scores[i] for i in everyone])
    groups: dict[str, StepModel] = {}
    temperatures: dict[str, float] = {}
    for group, choice in group_choices.items():
        positions = members[group]
        group_runs = [runs[i] for i in positions]
        temperatures[group] = choose_temperature(group_runs, [choice.scores[i] for i in positions])
        if choice.own_group:
            group_scorer = fit_ensemble(group_runs, configs, seed)
        elif choice.rule == pooled.rule and temperatures[group] == temperature:
            continue
        else:
            group_scorer = scorer
        groups[group] = StepModel(
            features=feature_names(),
            scorer=group_scorer,
            agent_rule=choice.rule,
            temperature=temperatures[group],
            training={"choice": choice.label()},
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
        step("auditor: prefix-only ensemble")
        prefix_runs = cache.matrices(records, use_ground_truth=use_ground_truth, prefix_only=True)
        prefix_scores = out_of_fold_scores(prefix_runs, configs, inner_folds, seed)
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
            scorer=fit_ensemble(prefix_runs, configs, seed),
            prefix_only=True,
            alarm_threshold=threshold,
            alarm_thresholds=thresholds,
            training={"configs": [asdict(config) for config in configs]},
        )
    return StepModel(
        features=feature_names(),
        scorer=scorer,
        agent_rule=pooled.rule,
        temperature=temperature,
        conformal=conformal,
        auditor=audit_model,
        groups=groups,
        training={
            "records": len(records),
            "seed": seed,
            "use_ground_truth": use_ground_truth,
            "inner_folds": inner_folds,
            "configs": [asdict(config) for config in configs],
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
@click.option(
    "--from-database",
    "database_url",
    metavar="URL",
    help=FROM_DATABASE_HELP,
)
def train_command(
    dataset: str,
    out: Path,
    seed: int,
    with_ground_truth: bool,
    datasets_dir: Path | None,
    database_url: str | None,
) -> None:
    """Train the `learned` attributor's step model and write it as JSON.

    Serve it with FAULTFINDER_LEARNED_MODEL=<file> (the learned attributor, the online
    auditor and the LLM pre-filter then use it instead of the packaged model).
    """
    require_training_packages()
    records, source, skipped = labelled_training_records(dataset, datasets_dir, database_url)
    if len(records) < MIN_TRAINING_RECORDS:
        raise click.ClickException(
            f"{source} has {len(records)} labelled records; training needs at least "
            f"{MIN_TRAINING_RECORDS}"
        )
    stderr = Console(stderr=True)
    with stderr.status(f"training on {len(records)} records of {source}") as status:
        model = tune_and_fit(
            records,
            cache=FeatureCache(),
            seed=seed,
            use_ground_truth=with_ground_truth,
            on_step=lambda label: status.update(f"training on {source}: {label}"),
        )
    model = replace(
        model,
        training={
            **model.training,
            "dataset": source,
            "trained_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out)
    chosen = model.training.get("configs", [])
    click.echo(
        json.dumps(
            {
                "out": str(out),
                "records": len(records),
                "dataset": source,
                "skipped": skipped,
                "configs": chosen,
                "agent_rule": model.agent_rule,
            }
        )
    )


def labelled_training_records(
    dataset: str, datasets_dir: Path | None, database_url: str | None
) -> tuple[list[BenchmarkRecord], str, list[str]]:
    """The records of `--dataset` (or none) plus the labelled runs of `--from-database`:
    (records, a description of where they came from, the database labels skipped)."""
    spec = dataset.strip().lower()
    if spec not in (*DATASET_SPECS, NO_DATASET):
        raise click.BadParameter(
            f"unknown dataset {dataset!r}; valid: {', '.join(DATASET_SPECS)}, or {NO_DATASET}"
            " with --from-database",
            param_hint="'--dataset'",
        )
    if spec == NO_DATASET and database_url is None:
        raise click.BadParameter(
            f"--dataset {NO_DATASET} leaves no records without --from-database",
            param_hint="'--dataset'",
        )
    records: list[BenchmarkRecord] = []
    sources: list[str] = []
    if spec != NO_DATASET:
        root = resolve_datasets_dir(datasets_dir)
        try:
            records.extend(load_dataset(dataset, root))
        except DatasetError as exc:
            raise click.ClickException(str(exc)) from None
        sources.append(dataset)
    skipped: list[str] = []
    if database_url is not None:
        labelled = _labelled_runs(database_url)
        records.extend(labelled.records)
        skipped = labelled.skipped
        sources.append(f"database ({len(labelled.records)} labelled runs)")
    return records, " + ".join(sources), skipped


def _labelled_runs(database_url: str) -> LabelledRuns:
    """The database's labelled runs, with progress on stderr; a clear error if unreadable."""
    import anyio

    from faultfinder.benchmarks.labelled import LabelledRunsError, labelled_records
    from faultfinder.server.db.engine import DatabaseURLError
    from faultfinder.server.db.engine import database_url as database_url_of
    from faultfinder.server.progress import Progress

    try:
        url = database_url_of(database_url)
    except DatabaseURLError as exc:
        raise click.BadParameter(str(exc), param_hint="'--from-database'") from None
    if url.get_backend_name() == "sqlite" and not Path(url.database or "").is_file():
        # Connecting would create an empty file: reading must not write.
        raise click.BadParameter(
            f"no SQLite database file at {url.database!r}", param_hint="'--from-database'"
        )
    with Progress(console=Console(stderr=True)) as progress:
        task = progress.add_task("reading labelled runs", total=None)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        async def read() -> LabelledRuns:
            return await labelled_records(database_url, on_run=advance)

        try:
            return anyio.run(read)
        except LabelledRunsError as exc:
            raise click.ClickException(str(exc)) from None
