"""While it serves, the sidecar keeps what start-up built out of full collections and
hands the GIL between threads quickly; it restores both at shutdown."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

from litestar.testing import TestClient

from faultfinder.server.app import SWITCH_INTERVAL_S, create_app
from faultfinder.server.settings import load_settings


def serving(tmp_path: Path) -> TestClient:  # type: ignore[type-arg]
    settings = load_settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'sidecar.db'}",
        grpc_enabled=False,
        workers=0,
    )
    return TestClient(app=create_app(settings), base_url="http://127.0.0.1")


def test_start_up_objects_are_frozen_while_serving_and_released_at_shutdown(
    tmp_path: Path,
) -> None:
    assert gc.get_freeze_count() == 0
    with serving(tmp_path) as client:
        assert client.get("/healthz").status_code == 200
        # The app's own objects are among those a full collection no longer walks.
        assert gc.get_freeze_count() > 10_000
    # A process that embeds the app (or a test run) gets them back after shutdown.
    assert gc.get_freeze_count() == 0


def test_the_gil_switch_interval_is_short_while_serving_and_restored_at_shutdown(
    tmp_path: Path,
) -> None:
    before = sys.getswitchinterval()
    assert before > SWITCH_INTERVAL_S
    with serving(tmp_path) as client:
        assert client.get("/healthz").status_code == 200
        assert sys.getswitchinterval() == SWITCH_INTERVAL_S
    assert sys.getswitchinterval() == before
