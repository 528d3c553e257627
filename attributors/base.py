"""The `Attributor` interface and the registry that picks attributors by name.

An attributor is a name plus `async attribute(trajectory, options) -> Attribution`.
Expected failures (unparseable reply, budget exhausted) come back as an
`Attribution` with status `failed`, not as exceptions.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from faultfinder.attributors.model import Attribution, Trajectory


@dataclass(frozen=True)
class AttributeOptions:
    """Per-call options shared by every method."""

    use_ground_truth: bool = True
    """Whether the method may look at the trajectory's ground-truth answer."""
    seed: int | None = None
    """Seed for methods with randomness; None means nondeterministic."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Method-specific options."""


@runtime_checkable
class Attributor(Protocol):
    """Blames one step and agent of a failed trajectory."""

    name: str

    async def attribute(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution: ...


AttributorFactory = Callable[..., Attributor]

_REGISTRY: dict[str, AttributorFactory] = {}

# Modules that register the built-in attributors when imported; loaded on first lookup
# so that importing the registry stays cheap.
_BUILTIN_MODULES = (
    "faultfinder.attributors.heuristics",
    "faultfinder.attributors.llm_methods",
    "faultfinder.attributors.learned",
)


class UnknownAttributorError(KeyError):
    """No attributor is registered under the requested name."""

    def __str__(self) -> str:
        return str(self.args[0])


def register(name: str) -> Callable[[AttributorFactory], AttributorFactory]:
    """Class/function decorator: make `name` resolve to this factory."""

    def decorate(factory: AttributorFactory) -> AttributorFactory:
        if name in _REGISTRY and _REGISTRY[name] is not factory:
            raise ValueError(f"attributor {name!r} is already registered")
        _REGISTRY[name] = factory
        return factory

    return decorate


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def available_attributors() -> list[str]:
    """Names that `get_attributor` accepts, sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def get_attributor(name: str, **config: Any) -> Attributor:
    """Build the attributor registered as `name` with its configuration."""
    _load_builtins()
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise UnknownAttributorError(
            f"unknown attributor {name!r}; available: {', '.join(sorted(_REGISTRY))}"
        ) from None
    return factory(**config)
