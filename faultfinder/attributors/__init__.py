"""The domain core: trajectories, attributions, the attributor interface and every method."""

from faultfinder.attributors.base import (
    AttributeOptions,
    Attributor,
    UnknownAttributorError,
    available_attributors,
    get_attributor,
    register,
)
from faultfinder.attributors.model import (
    Attribution,
    AttributionStatus,
    Candidate,
    PredictionSet,
    Step,
    StepKind,
    StepStatus,
    Trajectory,
    normalise_agent,
    validate_against,
)

__all__ = [
    "AttributeOptions",
    "Attribution",
    "AttributionStatus",
    "Attributor",
    "Candidate",
    "PredictionSet",
    "Step",
    "StepKind",
    "StepStatus",
    "Trajectory",
    "UnknownAttributorError",
    "available_attributors",
    "get_attributor",
    "normalise_agent",
    "register",
    "validate_against",
]
