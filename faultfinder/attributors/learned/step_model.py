"""The learned model's artifact (`StepModel`): features, scorer, and what turns scores into blame.

A model is a JSON file: the feature names it was trained on, its scorer
(`learned.scorers`), the softmax temperature and agent rule, the conformal calibration,
the online auditor's prefix-only model and per-framework group models. `default_model`
is the one shipped with the package under `faultfinder/attributors/models/`.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from faultfinder.attributors.conformal import ConformalCalibration
from faultfinder.attributors.learned.blame import softmax
from faultfinder.attributors.learned.features import (
    CONTEXT_FLAG_NEGATIONS,
    FEATURE_LABELS,
    feature_names,
    step_features,
)
from faultfinder.attributors.learned.scorers import Scorer, scorer_from_dict
from faultfinder.attributors.model import StepKind, Trajectory

__all__ = [
    "CONVERSATION",
    "DEFAULT_MODEL_RESOURCE",
    "MODEL_FORMAT",
    "AgentRule",
    "ModelFormatError",
    "StepModel",
    "default_model",
    "is_conversation",
    "trajectory_group",
]

MODEL_FORMAT = "faultfinder.learned-step-model/1"
DEFAULT_MODEL_RESOURCE = "models/default_learned.json"


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
            scorer = scorer_from_dict(data.get("scorer"), len(features), fail)
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


@lru_cache(maxsize=1)
def default_model() -> StepModel:
    """The model shipped with the package (trained on Who&When by `faultfinder train`)."""
    resource = resources.files("faultfinder.attributors").joinpath(DEFAULT_MODEL_RESOURCE)
    text = resource.read_text(encoding="utf-8")
    return StepModel.from_dict(
        json.loads(text), f"faultfinder.attributors/{DEFAULT_MODEL_RESOURCE}"
    )


CONVERSATION = "conversation"
"""The model group of runs with a user in the loop (`is_conversation`), whatever their
framework: a customer talking with a service agent fails otherwise than a team working
through a task, so such runs get a model of their own when training has enough of them."""

_NOT_ACTING = frozenset({StepKind.HUMAN, StepKind.SYSTEM})


def is_conversation(trajectory: Trajectory) -> bool:
    """Whether the user speaks again after an agent (or a tool) has acted: a conversation,
    not a task handed over once."""
    acted = False
    for step in trajectory.steps:
        if step.kind not in _NOT_ACTING:
            acted = True
        elif acted and step.kind is StepKind.HUMAN:
            return True
    return False


def trajectory_group(trajectory: Trajectory) -> str | None:
    """The run's model and calibration group: `CONVERSATION` for a conversation, else its
    framework, if the trace says."""
    if is_conversation(trajectory):
        return CONVERSATION
    framework = trajectory.metadata.get("framework")
    return framework if isinstance(framework, str) else None
