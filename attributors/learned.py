"""The `learned` attributor: a small trained step scorer evaluated in pure Python.

The model is a JSON artifact (`StepModel`): a linear scorer, a gradient-boosted tree
ensemble, or the mean of several of them, over the features of `attributors.features`,
trained by `faultfinder.benchmarks.train`. Scores become a distribution over steps (softmax);
the top step is blamed, and the agent answering for it (or the agent with the most mass)
is the agent; a tool's or human's report answers to the agent that acted before it
(`answerable_agents`).
Steps that are not an agent's doing (the task giver's turns, system prompts and
framework bookkeeping: `StepKind.HUMAN` / `StepKind.SYSTEM`) get no probability, so
they are never blamed, never in the agent mass and never alarmed on (`blameable`).
"""

from __future__ import annotations

import json
import math
import operator
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from faultfinder.attributors.base import AttributeOptions, register
from faultfinder.attributors.conformal import ConformalCalibration
from faultfinder.attributors.features import (
    CONTEXT_FLAG_NEGATIONS,
    FEATURE_LABELS,
    feature_names,
    step_features,
)
from faultfinder.attributors.heuristics import own_doing
from faultfinder.attributors.model import Attribution, Candidate, Step, StepKind, Trajectory

__all__ = [
    "DEFAULT_MODEL_RESOURCE",
    "MODEL_FORMAT",
    "AgentRule",
    "LearnedAttributor",
    "LinearScorer",
    "MeanScorer",
    "ModelFormatError",
    "RegressionTree",
    "Scorer",
    "StepModel",
    "TreeEnsembleScorer",
    "agent_scores",
    "answerable_agents",
    "blameable",
    "blameable_agents",
    "can_be_blamed",
    "default_model",
    "softmax",
    "trajectory_group",
]

MODEL_FORMAT = "faultfinder.learned-step-model/1"
DEFAULT_MODEL_RESOURCE = "models/default_learned.json"
_CANDIDATES_KEPT = 20


def _shown(value: float, shown: str) -> str:
    if shown == "flag":
        return "yes" if value >= 0.5 else "no"
    if shown == "log1p":
        return f"{math.expm1(value):.0f}"
    if shown == "share":
        return f"{100 * value:.0f} %"
    if shown == "ratio":
        return f"{math.exp(value):.1f}×"
    if shown == "int":
        return f"{value:.0f}"
    return f"{value:.2f}"


def _evidence_text(phrase: str, shown: str, value: float, typical: float) -> str:
    if shown == "flag":
        if value >= 0.5:
            return phrase
        for opening, negated in CONTEXT_FLAG_NEGATIONS.items():
            if phrase.startswith(opening):
                return f"{negated}{phrase[len(opening) :]}"
        return f"not {phrase}"
    return f"{phrase}: {_shown(value, shown)} (typical step: {_shown(typical, shown)})"


class ModelFormatError(ValueError):
    """A model file is not a valid step model; the message names the file and the field."""


class AgentRule:
    """How the blamed agent follows from the step scores."""

    TOP_STEP = "top_step"
    """The agent answering for the highest-scoring step (`answerable_agents`)."""
    AGENT_MASS = "agent_mass"
    """The agent whose steps carry the most probability mass."""

    ALL = (TOP_STEP, AGENT_MASS)


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


@dataclass(frozen=True)
class StepModel:
    """A trained step scorer plus what turns its scores into an attribution."""

    features: tuple[str, ...]
    scorer: Scorer
    prefix_only: bool = False
    temperature: float = 1.0
    """Softmax temperature turning scores into a distribution over steps."""
    agent_rule: str = AgentRule.TOP_STEP
    conformal: ConformalCalibration | None = None
    alarm_threshold: float | None = None
    """For prefix-only (auditor) models: the score above which a step raises an alarm."""
    alarm_thresholds: Mapping[str, float] = field(default_factory=dict)
    """Per framework (`trajectory.metadata["framework"]`): the alarm threshold chosen on
    that framework's training runs; runs of other frameworks use `alarm_threshold`."""
    auditor: StepModel | None = None
    """The prefix-only model the online auditor uses, shipped beside the main model."""
    groups: Mapping[str, StepModel] = field(default_factory=dict)
    """Per framework (`trajectory.metadata["framework"]`): the scorer, temperature and
    agent rule chosen for runs of that framework, when training found one that beats
    this (pooled) model on them. Runs of other frameworks use this model itself."""
    training: Mapping[str, Any] = field(default_factory=dict)
    """Provenance: dataset, records, seed, chosen hyper-parameters, CV estimates."""

    def __post_init__(self) -> None:
        expected = feature_names(prefix_only=self.prefix_only)
        if tuple(self.features) != expected:
            missing = sorted(set(expected) - set(self.features))
            extra = sorted(set(self.features) - set(expected))
            raise ModelFormatError(
                "model features do not match this version's feature set "
                f"(missing {missing}, unknown {extra}); retrain with `faultfinder train`"
            )
        if self.agent_rule not in AgentRule.ALL:
            raise ModelFormatError(
                f"agent_rule {self.agent_rule!r} is not one of {list(AgentRule.ALL)}"
            )
        for name, sub in self.groups.items():
            if sub.prefix_only != self.prefix_only or sub.groups:
                raise ModelFormatError(
                    f"group model {name!r} must match the model's prefix_only and have no groups"
                )

    def threshold_for(self, group: str | None) -> float | None:
        """The alarm threshold for runs of `group` (the pooled one unless it has its own)."""
        if group is not None and group in self.alarm_thresholds:
            return self.alarm_thresholds[group]
        return self.alarm_threshold

    def for_group(self, group: str | None) -> StepModel:
        """The model that scores runs of `group` (this one unless a group model exists)."""
        if group is not None:
            sub = self.groups.get(group)
            if sub is not None:
                return sub
        return self

    # --- scoring ---

    def score_rows(self, rows: Sequence[Sequence[float]]) -> list[float]:
        return [self.scorer.score(row) for row in rows]

    def explain(
        self,
        rows: Sequence[Sequence[float]],
        index: int,
        mask: Sequence[bool] | None = None,
        limit: int = 3,
    ) -> list[dict[str, Any]]:
        """What sets step `index` apart in this scorer's eyes: the features whose value,
        put back to the run's typical value (the median over its blameable steps), lowers
        the step's score the most; at most `limit`, one per phrase, largest drop first."""
        kept = [row for row, ok in zip(rows, mask or [True] * len(rows), strict=True) if ok]
        own = list(rows[index])
        base = self.scorer.score(own)
        drops: list[tuple[float, int, float]] = []
        for column, values in enumerate(zip(*(kept or rows), strict=True)):
            typical = statistics.median(values)
            if own[column] == typical:
                continue
            changed = own.copy()
            changed[column] = typical
            drop = base - self.scorer.score(changed)
            if drop > 1e-9:
                drops.append((drop, column, typical))
        drops.sort(key=lambda item: (-item[0], item[1]))
        found: list[dict[str, Any]] = []
        phrases: set[str] = set()
        for drop, column, typical in drops:
            name = self.features[column]
            phrase, shown = FEATURE_LABELS.get(name, (name, "number"))
            if phrase in phrases:
                continue
            phrases.add(phrase)
            found.append(
                {
                    "feature": name,
                    "text": _evidence_text(phrase, shown, own[column], typical),
                    "value": round(own[column], 6),
                    "typical": round(typical, 6),
                    "score_drop": round(drop, 6),
                }
            )
            if len(found) == limit:
                break
        return found

    def score(self, trajectory: Trajectory, *, use_ground_truth: bool = True) -> list[float]:
        """Raw score of every step of `trajectory` (by its framework's model, if any)."""
        rows = step_features(
            trajectory, use_ground_truth=use_ground_truth, prefix_only=self.prefix_only
        )
        return self.for_group(trajectory_group(trajectory)).score_rows(rows)

    def distribution(
        self, scores: Sequence[float], mask: Sequence[bool] | None = None
    ) -> list[float]:
        """Step probabilities; steps where `mask` is False get none (see `blameable`)."""
        return softmax(scores, self.temperature, mask)

    # --- (de)serialisation ---

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready. A group model that scores with this model's own scorer (it differs
        only in temperature or agent rule) is written without a `scorer`, which it then
        inherits on loading, so the scorer is stored once."""
        data: dict[str, Any] = {
            "format": MODEL_FORMAT,
            "features": list(self.features),
            "prefix_only": self.prefix_only,
            "temperature": self.temperature,
            "agent_rule": self.agent_rule,
            "scorer": self.scorer.to_dict(),
            "conformal": self.conformal.to_dict() if self.conformal else None,
            "alarm_threshold": self.alarm_threshold,
            "alarm_thresholds": dict(self.alarm_thresholds),
            "auditor": self.auditor.to_dict() if self.auditor else None,
            "groups": {},
            "training": dict(self.training),
        }
        for name, sub in self.groups.items():
            sub_data = sub.to_dict()
            if sub.scorer == self.scorer:
                del sub_data["scorer"]
            data["groups"][name] = sub_data
        return data

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], source: str = "model", inherited: Scorer | None = None
    ) -> StepModel:
        """Parse and validate a model; `inherited` is the scorer of a group model written
        without one (see `to_dict`)."""

        def fail(name: str, problem: str) -> ModelFormatError:
            return ModelFormatError(f"{source}: field {name!r} {problem}")

        if not isinstance(data, Mapping):
            raise ModelFormatError(f"{source}: expected a JSON object")
        if data.get("format") != MODEL_FORMAT:
            raise fail("format", f"must be {MODEL_FORMAT!r}, got {data.get('format')!r}")
        features = data.get("features")
        if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
            raise fail("features", "must be a list of feature names")
        if "scorer" not in data and inherited is not None:
            scorer = inherited
        else:
            scorer = _scorer_from_dict(data.get("scorer"), len(features), fail)
        conformal = data.get("conformal")
        auditor_data = data.get("auditor")
        # The nested model's errors already name their source.
        auditor = cls.from_dict(auditor_data, f"{source} (auditor)") if auditor_data else None
        threshold = data.get("alarm_threshold")
        thresholds_data = data.get("alarm_thresholds") or {}
        if not isinstance(thresholds_data, Mapping) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in thresholds_data.values()
        ):
            raise fail("alarm_thresholds", "must be an object mapping framework names to numbers")
        groups_data = data.get("groups") or {}
        if not isinstance(groups_data, Mapping):
            raise fail("groups", "must be an object mapping framework names to models")
        groups = {
            str(name): cls.from_dict(sub, f"{source} (group {name!r})", scorer)
            for name, sub in groups_data.items()
        }
        try:
            return cls(
                features=tuple(features),
                scorer=scorer,
                prefix_only=bool(data.get("prefix_only", False)),
                temperature=float(data.get("temperature", 1.0)),
                agent_rule=str(data.get("agent_rule", AgentRule.TOP_STEP)),
                conformal=ConformalCalibration.from_dict(conformal) if conformal else None,
                alarm_threshold=float(threshold) if threshold is not None else None,
                alarm_thresholds={str(k): float(v) for k, v in thresholds_data.items()},
                auditor=auditor,
                groups=groups,
                training=dict(data.get("training") or {}),
            )
        except (TypeError, ValueError) as exc:
            raise ModelFormatError(f"{source}: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> StepModel:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ModelFormatError(f"{path}: cannot read model file: {exc}") from None
        except json.JSONDecodeError as exc:
            raise ModelFormatError(f"{path}: not valid JSON: {exc}") from None
        return cls.from_dict(data, str(path))

    def save(self, path: str | Path) -> None:
        # Compact: the tree arrays dominate the file.
        text = json.dumps(self.to_dict(), separators=(",", ":"))
        Path(path).write_text(text + "\n", encoding="utf-8")


def _scorer_from_dict(data: Any, width: int, fail: Any) -> Scorer:
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
    if kind == "trees":
        trees = []
        for position, tree in enumerate(data.get("trees") or []):
            try:
                parsed = RegressionTree(
                    feature=tuple(int(v) for v in tree["feature"]),
                    threshold=tuple(float(v) for v in tree["threshold"]),
                    left=tuple(int(v) for v in tree["left"]),
                    right=tuple(int(v) for v in tree["right"]),
                    value=tuple(float(v) for v in tree["value"]),
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise fail(f"{name}.trees[{position}]", f"is not a valid tree: {exc}") from None
            size = len(parsed.feature)
            if size == 0 or not all(
                len(column) == size
                for column in (parsed.threshold, parsed.left, parsed.right, parsed.value)
            ):
                raise fail(f"{name}.trees[{position}]", "node arrays differ in length")
            for node in range(size):
                if parsed.feature[node] >= width:
                    raise fail(f"{name}.trees[{position}]", f"splits on feature >= {width}")
                if parsed.feature[node] >= 0 and not (
                    node < parsed.left[node] < size and node < parsed.right[node] < size
                ):
                    raise fail(f"{name}.trees[{position}]", f"node {node} has bad children")
            trees.append(parsed)
        return TreeEnsembleScorer(tuple(trees), float(data.get("base", 0.0)))
    kinds = "'linear', 'trees' or 'mean'" if name == "scorer" else "'linear' or 'trees'"
    raise fail(f"{name}.type", f"must be {kinds}, got {kind!r}")


@lru_cache(maxsize=1)
def default_model() -> StepModel:
    """The model shipped with the package (trained on Who&When by `faultfinder train`)."""
    resource = resources.files("faultfinder.attributors").joinpath(DEFAULT_MODEL_RESOURCE)
    text = resource.read_text(encoding="utf-8")
    return StepModel.from_dict(
        json.loads(text), f"faultfinder.attributors/{DEFAULT_MODEL_RESOURCE}"
    )


_NOT_BLAMED_KINDS = frozenset({StepKind.HUMAN, StepKind.SYSTEM})


def blameable(steps: Sequence[Step]) -> list[bool]:
    """Which steps the learned scorer may blame: every step an agent, a tool or a handoff
    produced; not the task giver's turns nor system prompts and bookkeeping, which are
    never the decisive mistake of the system (no Who&When or Who&When Pro label points at
    one). A run made only of such steps keeps them all, so there is always a candidate."""
    mask = [can_be_blamed(step) for step in steps]
    return mask if any(mask) else [True] * len(mask)


def can_be_blamed(step: Step) -> bool:
    """Whether `step` is an agent's, tool's or handoff's doing (see `blameable`)."""
    return step.kind not in _NOT_BLAMED_KINDS


def answerable_agents(steps: Sequence[Step]) -> list[str]:
    """The agent that answers for each step: its own agent where the step is its own
    doing (an acting step, or a tool call recorded under the caller's name:
    `heuristics.own_doing`); for a report under a tool's, terminal's or human's name, the
    agent of the nearest earlier such step (the one that called the tool), as
    `first_error` blames it; the step's own agent where no agent acted before it."""
    answerable: list[str] = []
    actor: str | None = None
    for step, mine in zip(steps, own_doing(steps), strict=True):
        if mine:
            actor = step.agent
        answerable.append(actor if actor is not None else step.agent)
    return answerable


def blameable_agents(trajectory: Trajectory) -> tuple[str, ...]:
    """The agents an attribution may name: those answering for a blameable step (in order
    of first appearance), then the declared team members that never acted in this run.
    Never the task giver or the system prompt's author, nor a tool whose reports answer
    to the agent that called it."""
    steps = trajectory.steps
    acting = (
        agent for agent, ok in zip(answerable_agents(steps), blameable(steps), strict=True) if ok
    )
    return tuple(dict.fromkeys((*acting, *trajectory.declared_roster)))


def softmax(
    scores: Sequence[float], temperature: float = 1.0, mask: Sequence[bool] | None = None
) -> list[float]:
    """Scores → probabilities summing to 1 (numerically stable); where `mask` is given,
    the steps it marks False get probability 0 (it must keep at least one step)."""
    if not scores:
        return []
    if mask is not None:
        if len(mask) != len(scores):
            raise ValueError(f"mask has {len(mask)} entries for {len(scores)} scores")
        kept = softmax([s for s, keep in zip(scores, mask, strict=True) if keep], temperature)
        if not kept:
            raise ValueError("the mask keeps no step")
        values = iter(kept)
        return [next(values) if keep else 0.0 for keep in mask]
    t = temperature if temperature > 0 else 1.0
    top = max(scores)
    weights = [math.exp((s - top) / t) for s in scores]
    total = sum(weights)
    return [w / total for w in weights]


def agent_scores(agents: Sequence[str], probabilities: Sequence[float]) -> dict[str, float]:
    """Probability mass per agent (agents in order of first appearance)."""
    mass: dict[str, float] = {}
    for agent, p in zip(agents, probabilities, strict=True):
        mass[agent] = mass.get(agent, 0.0) + p
    return mass


@register("learned")
class LearnedAttributor:
    """Score every step with a trained model; blame the top step (zero LLM calls).

    Configuration: `model` (a `StepModel`) or `model_path` (a JSON file from
    `faultfinder train`); default is the packaged model. `AttributeOptions.extra`
    may carry `alpha` for the conformal prediction set (default 0.1; None disables).
    """

    name = "learned"

    def __init__(self, model: StepModel | None = None, model_path: str | None = None) -> None:
        if model is None and model_path is not None:
            model = StepModel.load(model_path)
        self.model = model if model is not None else default_model()

    async def attribute(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
        return self.attribute_now(trajectory, options)

    def attribute_now(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
        """The attribution, computed synchronously (it takes milliseconds)."""
        started = time.perf_counter()
        if not trajectory.steps:
            return Attribution.failed(self.name, "the trajectory has no steps")
        group = trajectory_group(trajectory)
        model = self.model.for_group(group)
        use_gt = options.use_ground_truth and trajectory.ground_truth is not None
        rows = step_features(trajectory, use_ground_truth=use_gt, prefix_only=model.prefix_only)
        scores = model.score_rows(rows)
        mask = blameable(trajectory.steps)
        probabilities = model.distribution(scores, mask)
        steps = trajectory.steps
        ranked = sorted(range(len(steps)), key=lambda i: (-probabilities[i], i))
        order = [i for i in ranked if mask[i]]
        top = order[0]
        answerable = answerable_agents(steps)
        # The agent rule was chosen on the scores' plain softmax (temperature 1); the
        # model's temperature only shapes the step distribution for the conformal set.
        mass = agent_scores(answerable, softmax(scores, 1.0, mask))
        if model.agent_rule == AgentRule.AGENT_MASS:
            agent = max(mass, key=lambda name: mass[name])
        else:
            agent = answerable[top]
        candidates = tuple(
            Candidate(
                step=i,
                agent=answerable[i],
                score=round(probabilities[i], 6),
                evidence=f"model score {scores[i]:.3f}",
            )
            for i in order[:_CANDIDATES_KEPT]
        )
        evidence = model.explain(rows, top, mask)
        alpha = options.extra.get("alpha", 0.1)
        prediction_set = None
        conformal = self.model.conformal
        if conformal is not None and alpha is not None:
            prediction_set = conformal.prediction_set(probabilities, float(alpha), group=group)
        return Attribution(
            method=self.name,
            agent=agent,
            step=top,
            reason=_reason(top, probabilities[top], len(steps), evidence),
            confidence=min(1.0, max(0.0, probabilities[top])),
            candidates=candidates,
            prediction_set=prediction_set,
            used_ground_truth=use_gt,
            llm_calls=0,
            latency_s=time.perf_counter() - started,
            details={
                "model": {
                    key: self.model.training[key]
                    for key in ("dataset", "records", "trained_at")
                    if key in self.model.training
                },
                "agent_rule": model.agent_rule,
                "model_group": group if model is not self.model else None,
                "agent_mass": {name: round(value, 6) for name, value in mass.items()},
                "evidence": evidence,
                "step_probabilities": [round(p, 6) for p in probabilities],
            },
        )


def _reason(top: int, probability: float, n: int, evidence: Sequence[Mapping[str, Any]]) -> str:
    reason = f"highest model score at step {top} (p={probability:.2f} over {n} steps)"
    if evidence:
        reason += "; what sets it apart: " + "; ".join(str(e["text"]) for e in evidence)
    return reason


def trajectory_group(trajectory: Trajectory) -> str | None:
    """The run's framework (its calibration and model group), if the trace says."""
    framework = trajectory.metadata.get("framework")
    return framework if isinstance(framework, str) else None
