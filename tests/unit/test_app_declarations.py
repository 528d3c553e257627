"""The HTTP handlers are declared the way Litestar 3 will still accept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# Run in a fresh interpreter: a module-level warning fires once per process, so an import
# made earlier by another test would hide it.
PROBE = """
import warnings
from litestar.exceptions import LitestarDeprecationWarning
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from faultfinder.server.app import create_app
    from faultfinder.server.settings import Settings
    create_app(Settings(database_url="sqlite+aiosqlite:///{db}"))
for warning in caught:
    if issubclass(warning.category, LitestarDeprecationWarning):
        print(warning.message)
"""


def test_building_the_app_uses_no_deprecated_litestar_declaration(tmp_path: Path) -> None:
    probe = PROBE.format(db=tmp_path / "probe.db")
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "", result.stdout
