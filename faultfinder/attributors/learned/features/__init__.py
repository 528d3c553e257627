"""Per-step features of a trajectory for the learned step scorer and the online auditor.

Pure and fast (one pass, regexes and token sets): `step_features` turns a trajectory
into one numeric row per step, in the order of `FEATURES` (or `PREFIX_FEATURES`):
the columns and their labels are in `columns`, what is read from one step's text in
`text`, the prefix-safe features step by step in `prefix` (`PrefixScanner`), and the
whole-run features and context columns in `matrix`.
"""

from faultfinder.attributors.learned.features.columns import (
    CONTEXT_FEATURES,
    CONTEXT_FLAG_NEGATIONS,
    FEATURE_LABELS,
    FEATURES,
    PREFIX_FEATURES,
    STEP_FEATURES,
    Feature,
    feature_names,
)
from faultfinder.attributors.learned.features.matrix import RunFeatures, run_features, step_features
from faultfinder.attributors.learned.features.prefix import PrefixScanner, shows_evidence
from faultfinder.attributors.learned.features.text import extract_final_answer

__all__ = [
    "CONTEXT_FEATURES",
    "CONTEXT_FLAG_NEGATIONS",
    "FEATURES",
    "FEATURE_LABELS",
    "PREFIX_FEATURES",
    "STEP_FEATURES",
    "Feature",
    "PrefixScanner",
    "RunFeatures",
    "extract_final_answer",
    "feature_names",
    "run_features",
    "shows_evidence",
    "step_features",
]
