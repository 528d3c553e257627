"""`faultfinder demo` (the README's main job) runs end to end and prints who and when."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.integration.sidecar import FAULTFINDER, free_port


def test_demo_replays_failures_and_prints_their_attributions(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            str(FAULTFINDER), "demo", "--no-serve", "--records", "2",
            "--port", str(free_port()),
            "--database-url", f"sqlite+aiosqlite:///{tmp_path / 'demo.db'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    runs = result.stdout.split("\nrun ")[1:]
    assert len(runs) == 2
    for run in runs:
        assert "labelled culprit" in run
        assert "first_error" in run and "learned" in run
        assert "failed:" not in run
    assert "/ui" in result.stderr
