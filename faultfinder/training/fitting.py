"""Fitting step scorers on labelled runs: linear (L-BFGS) and boosted trees (LightGBM).

Both maximise the conditional-logit likelihood of the gold step, a softmax over each
run's blameable steps, so that every scorer's scores are log-potentials of the step
distribution and an ensemble may average them (`fit_ensemble`). numpy, scipy and
lightgbm are imported by the functions that need them, never at import time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from faultfinder.attributors.learned.scorers import (
    LinearScorer,
    MeanScorer,
    RegressionTree,
    Scorer,
    TreeEnsembleScorer,
)
from faultfinder.training.runs import RunMatrix, stratified_folds

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DEFAULT_GRID",
    "ModelConfig",
    "batch_scores",
    "fit_ensemble",
    "fit_scorer",
    "out_of_fold_scores",
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
