"""The step scorers of a learned model and how they are read back from its JSON.

A scorer maps one step's feature row to a score: a linear scorer, a gradient-boosted
tree ensemble (compiled to one Python function of nested conditionals), or the mean of
several of them. `scorer_from_dict` parses and validates a scorer written by `to_dict`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

__all__ = [
    "LinearScorer",
    "MeanScorer",
    "MemberScorer",
    "RegressionTree",
    "Scorer",
    "TreeEnsembleScorer",
    "scorer_from_dict",
]


@dataclass(frozen=True)
class LinearScorer:
    """score = bias + Σ weight_j · (x_j − mean_j) / scale_j."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float = 0.0

    def score(self, row: Sequence[float]) -> float:
        coefficients, offset = self._folded
        if len(row) != len(coefficients):
            raise ValueError(f"expected {len(coefficients)} features, got {len(row)}")
        products: Iterable[float] = map(operator.mul, coefficients, row)
        return offset + sum(products)

    @cached_property
    def _folded(self) -> tuple[tuple[float, ...], float]:
        """The weights divided by the scales, and the bias minus what the means take off:
        score = offset + Σ coefficient_j · x_j, one multiply-add per feature."""
        coefficients = tuple(w / s for w, s in zip(self.weights, self.scale, strict=True))
        offset = self.bias - math.fsum(c * m for c, m in zip(coefficients, self.mean, strict=True))
        return coefficients, offset

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "linear",
            "mean": list(self.mean),
            "scale": list(self.scale),
            "weights": list(self.weights),
            "bias": self.bias,
        }


@dataclass(frozen=True)
class RegressionTree:
    """One tree as flat node arrays; a node with feature -1 is a leaf holding `value`."""

    feature: tuple[int, ...]
    threshold: tuple[float, ...]
    left: tuple[int, ...]
    right: tuple[int, ...]
    value: tuple[float, ...]

    def score(self, row: Sequence[float]) -> float:
        node = 0
        feature, threshold, left, right = self.feature, self.threshold, self.left, self.right
        while feature[node] >= 0:
            node = left[node] if row[feature[node]] <= threshold[node] else right[node]
        return self.value[node]


@dataclass(frozen=True)
class TreeEnsembleScorer:
    """score = base + Σ tree(x); each tree splits on `x[feature] <= threshold` (left)."""

    trees: tuple[RegressionTree, ...]
    base: float = 0.0

    def score(self, row: Sequence[float]) -> float:
        return self.base + self._compiled(row)

    @cached_property
    def _compiled(self) -> Callable[[Sequence[float]], float]:
        return _compile_trees(self.trees)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "trees",
            "base": self.base,
            "trees": [
                {
                    "feature": list(t.feature),
                    "threshold": list(t.threshold),
                    "left": list(t.left),
                    "right": list(t.right),
                    "value": list(t.value),
                }
                for t in self.trees
            ],
        }


def _compile_trees(trees: Sequence[RegressionTree]) -> Callable[[Sequence[float]], float]:
    """The sum of the trees' values for a row, as one function of nested conditional
    expressions (a few times faster than walking the node arrays, which dominated the
    attribution of long runs). The source is written from the trees' numbers only: node
    features as ints and constants as `repr` of finite floats, which Python reads back
    exactly; trees with a non-finite constant are walked instead."""

    def expression(tree: RegressionTree, node: int) -> str:
        feature = int(tree.feature[node])
        if feature < 0:
            return repr(float(tree.value[node]))
        return (
            f"({expression(tree, tree.left[node])} if x[{feature}] <= "
            f"{float(tree.threshold[node])!r} else {expression(tree, tree.right[node])})"
        )

    finite = all(math.isfinite(v) for tree in trees for v in (*tree.threshold, *tree.value))
    if not finite:
        return lambda row: sum(tree.score(row) for tree in trees)
    lines = ["def total(x):", "    s = 0"]
    lines += [f"    s += {expression(tree, 0)}" for tree in trees]
    lines.append("    return s")
    namespace: dict[str, Any] = {}
    exec(compile("\n".join(lines), "<faultfinder tree ensemble>", "exec"), namespace)
    compiled: Callable[[Sequence[float]], float] = namespace["total"]
    return compiled


MemberScorer = LinearScorer | TreeEnsembleScorer


@dataclass(frozen=True)
class MeanScorer:
    """score = the mean of the members' scores.

    The members are trained under the same likelihood (a softmax over a run's steps), so
    each score is a log-potential of the step distribution and their mean is the
    normalised geometric mean of the members' distributions: an average of several
    models instead of a choice among them.
    """

    members: tuple[MemberScorer, ...]

    def __post_init__(self) -> None:
        if not self.members:
            raise ValueError("a mean scorer needs at least one member")

    def score(self, row: Sequence[float]) -> float:
        return sum(member.score(row) for member in self.members) / len(self.members)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "mean", "members": [member.to_dict() for member in self.members]}


Scorer = LinearScorer | TreeEnsembleScorer | MeanScorer


def scorer_from_dict(data: Any, width: int, fail: Any) -> Scorer:
    """The scorer of a model file with `width` features; `fail(field, problem)` makes
    the error to raise for an invalid field."""
    if isinstance(data, Mapping) and data.get("type") == "mean":
        members = data.get("members")
        if not isinstance(members, list) or not members:
            raise fail("scorer.members", "must be a non-empty list of scorers")
        return MeanScorer(
            tuple(
                _member_from_dict(member, width, fail, f"scorer.members[{position}]")
                for position, member in enumerate(members)
            )
        )
    return _member_from_dict(data, width, fail, "scorer")


def _member_from_dict(data: Any, width: int, fail: Any, name: str) -> MemberScorer:
    """A linear or tree scorer; `name` is where it sits in the file, for the error."""
    if not isinstance(data, Mapping):
        raise fail(name, "must be an object")
    kind = data.get("type")
    if kind == "linear":
        return _linear_from_dict(data, width, fail, name)
    if kind == "trees":
        trees = tuple(
            _tree_from_dict(tree, width, fail, f"{name}.trees[{position}]")
            for position, tree in enumerate(data.get("trees") or [])
        )
        return TreeEnsembleScorer(trees, float(data.get("base", 0.0)))
    kinds = "'linear', 'trees' or 'mean'" if name == "scorer" else "'linear' or 'trees'"
    raise fail(f"{name}.type", f"must be {kinds}, got {kind!r}")


def _linear_from_dict(data: Mapping[str, Any], width: int, fail: Any, name: str) -> LinearScorer:
    """A linear scorer over `width` features."""
    try:
        mean = tuple(float(v) for v in data["mean"])
        scale = tuple(float(v) for v in data["scale"])
        weights = tuple(float(v) for v in data["weights"])
        bias = float(data.get("bias", 0.0))
    except (KeyError, TypeError, ValueError) as exc:
        raise fail(name, f"is not a valid linear scorer: {exc}") from None
    if not len(mean) == len(scale) == len(weights) == width:
        raise fail(name, f"needs {width} means, scales and weights")
    if any(s <= 0 for s in scale):
        raise fail(f"{name}.scale", "must be positive")
    return LinearScorer(mean, scale, weights, bias)


def _tree_from_dict(tree: Any, width: int, fail: Any, name: str) -> RegressionTree:
    """One regression tree whose splits use features below `width` and whose children
    come after their parent."""
    try:
        parsed = RegressionTree(
            feature=tuple(int(v) for v in tree["feature"]),
            threshold=tuple(float(v) for v in tree["threshold"]),
            left=tuple(int(v) for v in tree["left"]),
            right=tuple(int(v) for v in tree["right"]),
            value=tuple(float(v) for v in tree["value"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise fail(name, f"is not a valid tree: {exc}") from None
    size = len(parsed.feature)
    if size == 0 or not all(
        len(column) == size
        for column in (parsed.threshold, parsed.left, parsed.right, parsed.value)
    ):
        raise fail(name, "node arrays differ in length")
    for node in range(size):
        if parsed.feature[node] >= width:
            raise fail(name, f"splits on feature >= {width}")
        if parsed.feature[node] >= 0 and not (
            node < parsed.left[node] < size and node < parsed.right[node] < size
        ):
            raise fail(name, f"node {node} has bad children")
    return parsed
