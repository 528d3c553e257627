"""The `learned` attributor: a small trained step scorer evaluated in pure Python.

The model is a JSON artifact (`StepModel`, `learned.step_model`): a linear scorer, a
gradient-boosted tree ensemble, or the mean of several of them (`learned.scorers`), over
the per-step features of `learned.features`, fitted by `faultfinder.training` (`faultfinder
train`). Scores become a distribution over steps (softmax); the top step is blamed, and
the agent answering for it (or the agent with the most mass) is the agent; a tool's or
human's report answers to the agent that acted before it (`learned.blame`).

Inference needs nothing beyond the standard library; training needs numpy, scipy and
lightgbm (the `train` extra), which only `faultfinder.training`'s fitting functions import.
"""

from faultfinder.attributors.learned.attributor import LearnedAttributor
from faultfinder.attributors.learned.blame import (
    agent_scores,
    answerable_agents,
    blameable,
    blameable_agents,
    can_be_blamed,
    softmax,
)
from faultfinder.attributors.learned.scorers import (
    LinearScorer,
    MeanScorer,
    RegressionTree,
    Scorer,
    TreeEnsembleScorer,
)
from faultfinder.attributors.learned.step_model import (
    CONVERSATION,
    DEFAULT_MODEL_RESOURCE,
    MODEL_FORMAT,
    AgentRule,
    ModelFormatError,
    StepModel,
    default_model,
    is_conversation,
    trajectory_group,
)

__all__ = [
    "CONVERSATION",
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
    "is_conversation",
    "softmax",
    "trajectory_group",
]
