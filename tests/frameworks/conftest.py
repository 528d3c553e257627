"""The conformance suite runs in framework environments made by `nox -s conformance`
(noxfile.py); in the main environment its modules are not collected, since the frameworks
are not installed there."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from tests.frameworks.environments import FRAMEWORKS, by_name
from tests.frameworks.harness import sidecar_for
from tests.integration.sidecar import Sidecar

if not os.environ.get("FAULTFINDER_CONFORMANCE"):
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    with sidecar_for(tmp_path_factory.mktemp("sidecar")) as running:
        yield running


@pytest.fixture(scope="module", autouse=True)
def tested_versions(request: pytest.FixtureRequest) -> None:
    """The framework under test (the nox session's, else the module's) runs at the versions
    environments.py pins, which the README's matrix names."""
    name = os.environ.get("FAULTFINDER_CONFORMANCE_FRAMEWORK")
    if not name:
        module = Path(request.module.__file__).name
        (name,) = [f.name for f in FRAMEWORKS if f.module == module][:1] or [""]
    framework = by_name(name)
    for requirement, version in framework.pinned.items():
        package = re.sub(r"\[.*\]$", "", requirement)
        installed = metadata.version(package)
        assert installed == version, f"{package} {installed} is installed, {version} pinned"
