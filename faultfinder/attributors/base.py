"""The `Attributor` interface and the registry that picks attributors by name.

An attributor is a name plus `async attribute(trajectory, options) -> Attribution`, and
optionally `async aclose()` for what it holds open. Expected failures (unparseable reply,
budget exhausted) come back as an `Attribution` with status `failed`, not as exceptions.

Attributors register with `@register("name")`: the built-in ones in this package, plugins
in modules a setting names or behind entry points of the group `faultfinder.attributors`
(an entry point names a module that registers, or a factory registered under the entry
point's name). A factory that takes a `context` argument is given the service's
`AttributorContext`.
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
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
    """Blames one step and agent of a failed trajectory.

    An attributor that only computes (no I/O, no model calls) may say so with a class
    attribute `cpu_bound = True`: the sidecar then runs it in a worker thread, so a long
    trajectory does not stall ingest and queries on the event loop. Whether it asks a
    model is the class attribute `calls_model` (`not cpu_bound` when absent): the workers
    run the attributors that do not in a lane of their own, so a slow model never holds
    up a zero-LLM answer (`calls_model`).
    """

    name: str

    async def attribute(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution: ...


AttributorFactory = Callable[..., Attributor]

ENTRY_POINT_GROUP = "faultfinder.attributors"
"""The entry point group in which installed packages offer attributors."""

_REGISTRY: dict[str, AttributorFactory] = {}
_entry_points_loaded = False

# Modules that register the built-in attributors when imported; loaded on first lookup
# so that importing the registry stays cheap.
_BUILTIN_MODULES = (
    "faultfinder.attributors.heuristics",
    "faultfinder.attributors.baselines",
    "faultfinder.attributors.llm.methods",
    "faultfinder.attributors.learned",
)


class UnknownAttributorError(KeyError):
    """No attributor is registered under the requested name."""

    def __str__(self) -> str:
        return str(self.args[0])


class PluginError(Exception):
    """An attributor plugin could not be loaded; the message names it and says why."""


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
    if not _entry_points_loaded:
        load_entry_points()


def _load_entry_point(entry_point: EntryPoint) -> None:
    try:
        loaded = entry_point.load()
    except Exception as exc:
        raise PluginError(
            f"attributor plugin entry point {entry_point.name!r} ({entry_point.value}) in "
            f"group {ENTRY_POINT_GROUP!r} cannot be loaded: {type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(loaded, types.ModuleType) or _REGISTRY.get(entry_point.name) is loaded:
        return
    if not callable(loaded):
        raise PluginError(
            f"attributor plugin entry point {entry_point.name!r} ({entry_point.value}) in "
            f"group {ENTRY_POINT_GROUP!r} names neither a module nor an attributor factory"
        )
    try:
        register(entry_point.name)(loaded)
    except ValueError as exc:
        raise PluginError(
            f"attributor plugin entry point {entry_point.name!r} ({entry_point.value}): {exc}"
        ) from None


def load_entry_points() -> None:
    """Load the attributors installed packages offer in the `faultfinder.attributors`
    entry point group (raises PluginError naming an entry point that cannot be loaded)."""
    global _entry_points_loaded
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        _load_entry_point(entry_point)
    _entry_points_loaded = True


def available_attributors() -> list[str]:
    """Names that `get_attributor` accepts, sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


async def close_attributor(attributor: Attributor) -> None:
    """Close what `attributor` holds open, when it defines `async aclose()`."""
    close = getattr(attributor, "aclose", None)
    if close is not None:
        await close()


def calls_model(name: str) -> bool:
    """Whether the attributor registered as `name` asks a model (and so may take minutes):
    its factory's `calls_model` attribute, else `not cpu_bound`. An unknown name, or a
    factory that says neither, counts as asking one, the slow lane being the safe guess."""
    _load_builtins()
    factory = _REGISTRY.get(name)
    declared = getattr(factory, "calls_model", None)
    if isinstance(declared, bool):
        return declared
    return not getattr(factory, "cpu_bound", False)


def takes_context(factory: AttributorFactory) -> bool:
    """Whether `factory` declares a `context` argument (older plugins do not)."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    parameter = parameters.get("context")
    return parameter is not None and parameter.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )


def get_attributor(name: str, context: object | None = None, **config: Any) -> Attributor:
    """Build the attributor registered as `name` with its configuration, handing it
    `context` (the service's `AttributorContext`) when its factory takes one.

    The registry hands the context on untouched, so it does not name its type: the
    context sits above the methods it serves (it holds their model connections and the
    learned model), and each method family says which of its members it reads."""
    _load_builtins()
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise UnknownAttributorError(
            f"unknown attributor {name!r}; available: {', '.join(sorted(_REGISTRY))}"
        ) from None
    if context is not None and takes_context(factory):
        return factory(context=context, **config)
    return factory(**config)
