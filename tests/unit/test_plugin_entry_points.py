"""Attributor plugins offered by installed packages through the `faultfinder.attributors`
entry point group: a real `*.dist-info/entry_points.txt` on sys.path, found by
`importlib.metadata`, naming a factory or a module that registers."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from faultfinder.attributors import base
from faultfinder.attributors.base import (
    AttributeOptions,
    PluginError,
    available_attributors,
    get_attributor,
    load_entry_points,
)
from faultfinder.attributors.context import AttributorContext
from faultfinder.attributors.model import Step, Trajectory
from faultfinder.server.composition import load_plugins
from faultfinder.server.settings import SettingsError, load_settings

FACTORY_MODULE = """
from faultfinder.attributors.model import Attribution


class Shout:
    name = "shout"

    def __init__(self, context=None):
        self.context = context

    async def attribute(self, trajectory, options):
        last = trajectory.steps[-1]
        return Attribution(method=self.name, agent=last.agent, step=last.index, reason="loud")
"""

REGISTERING_MODULE = """
from faultfinder.attributors.base import register
from faultfinder.attributors.model import Attribution


@register("whisper")
class Whisper:
    name = "whisper"

    async def attribute(self, trajectory, options):
        first = trajectory.steps[0]
        return Attribution(method=self.name, agent=first.agent, step=0, reason="quiet")
"""


def install(root: Path, distribution: str, entry_points: str, modules: dict[str, str]) -> None:
    """A package as pip leaves it: its modules and a dist-info with its entry points."""
    info = root / f"{distribution}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    for name, source in modules.items():
        (root / f"{name}.py").write_text(source)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry to change: the built-ins loaded, nothing else kept after the test."""
    available_attributors()
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    monkeypatch.setattr(base, "_entry_points_loaded", False)


async def test_attributors_behind_entry_points_are_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: None
) -> None:
    install(
        tmp_path,
        "ff_test_plugins",
        """
        [faultfinder.attributors]
        shout = ff_test_shout:Shout
        whisper = ff_test_whisper
        """,
        {"ff_test_shout": FACTORY_MODULE, "ff_test_whisper": REGISTERING_MODULE},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in ("ff_test_shout", "ff_test_whisper"):
        monkeypatch.delitem(sys.modules, module, raising=False)

    names = available_attributors()
    assert {"shout", "whisper", "first_error"} <= set(names)
    context = AttributorContext()
    shout = get_attributor("shout", context)
    assert shout.context is context  # type: ignore[attr-defined]
    trajectory = Trajectory(
        run_id="r",
        steps=(Step(index=0, agent="a", content="x"), Step(index=1, agent="b", content="y")),
    )
    answer = await shout.attribute(trajectory, AttributeOptions())
    assert (answer.agent, answer.step) == ("b", 1)
    whisper = await get_attributor("whisper").attribute(trajectory, AttributeOptions())
    assert (whisper.agent, whisper.step) == ("a", 0)
    # Loading again finds the same factories and registers nothing twice.
    load_entry_points()


def test_a_broken_entry_point_is_named_in_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: None
) -> None:
    install(
        tmp_path,
        "ff_test_broken",
        """
        [faultfinder.attributors]
        vanished = ff_test_no_such_module:Gone
        """,
        {},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        PluginError, match=r"entry point 'vanished' \(ff_test_no_such_module:Gone\)"
    ):
        load_entry_points()
    with pytest.raises(PluginError, match="vanished"):
        available_attributors()
    with pytest.raises(SettingsError, match=r"'vanished'.*ModuleNotFoundError"):
        load_plugins(load_settings())
