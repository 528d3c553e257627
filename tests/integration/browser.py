"""A real headless Chromium for the dashboard tests: Debian's `chromium` at
/usr/bin/chromium, driven by Playwright (the browser Playwright would download is never
used). The fixtures `browser` and `expect` are in this folder's conftest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LIVE_TIMEOUT_MS = 30_000
"""How long `expect` waits for the page (live updates included)."""

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
)


def playwright_api() -> Any:
    return pytest.importorskip("playwright.sync_api", reason="needs the playwright package")


def launched_chromium(sync_api: Any) -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            launched.close()
