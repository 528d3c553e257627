"""The conformance suite runs in framework environments made by `nox -s conformance`
(noxfile.py); in the main environment its modules are not collected, since the frameworks
are not installed there."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.frameworks.harness import sidecar_for
from tests.integration.sidecar import Sidecar

if not os.environ.get("FAULTFINDER_CONFORMANCE"):
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    with sidecar_for(tmp_path_factory.mktemp("sidecar")) as running:
        yield running
