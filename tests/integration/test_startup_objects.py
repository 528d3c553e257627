"""While it serves, the sidecar keeps what start-up built out of full collections and
hands the GIL between threads quickly; it restores both at shutdown."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

from litestar.testing import TestClient

from faultfinder.server.app import SWITCH_INTERVAL_S, create_app
from faultfinder.server.settings import load_settings


def test_start_up_objects_are_frozen_while_serving_and_released_at_shutdown(
    tmp_path: Path,
) -> None:
    settings = load_settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'frozen.db'}",
        grpc_enabled=False,
        workers=0,
    )
    assert gc.get_freeze_count() == 0
    with TestClient(app=create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
        # The app's own objects are among those a full collection no longer walks.
        assert gc.get_freeze_count() > 10_000
    # A process that embeds the app (or a test run) gets them back after shutdown.
    assert gc.get_freeze_count() == 0


def test_the_gil_switch_interval_is_short_while_serving_and_restored_at_shutdown(
    tmp_path: Path,
) -> None:
    settings = load_settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'switch.db'}",
        grpc_enabled=False,
        workers=0,
    )
    before = sys.getswitchinterval()
    assert before > SWITCH_INTERVAL_S
    with TestClient(app=create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
        assert sys.getswitchinterval() == SWITCH_INTERVAL_S
    assert sys.getswitchinterval() == before
