"""Run ids with any characters in the URL: `/api/runs/a%2Fb/labels` addresses run `a/b`.

The ASGI server decodes `%2F` into the `/` of the path before routing, so a run id holding
a slash would split into two path segments and match nothing. This wrapper, in front of
the router, takes the run id segment from the undecoded `raw_path` and hands it on still
percent-encoded; the run handlers decode it once (`stored_run_id`). An id is thus
addressable whatever it holds, as long as the client URL-encodes it (the SDK, the CLI and
the dashboard's links do).
"""

from __future__ import annotations

import re
import urllib.parse

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, Scope, Send

_RUN_PATH = re.compile(r"^(/api/runs/|/ui/runs/)([^/]+)(/[a-z]+)?/?$")


def as_stored(text: str) -> str:
    """Text as the store keeps it: PostgreSQL text cannot hold NUL, so the store writes
    U+FFFD instead; a run id or filter sent with NUL must match that (not crash the query)."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def stored_run_id(segment: str) -> str:
    """The run id a path segment addresses (left percent-encoded by `EncodedRunIds`), as
    the store keeps it."""
    return as_stored(urllib.parse.unquote(segment))


class EncodedRunIds:
    """ASGI wrapper: the run id segment of `/api/runs/…` and `/ui/runs/…` stays encoded."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP:
            path: str = scope.get("path", "")
            if path.startswith(("/api/runs/", "/ui/runs/")):
                raw = scope.get("raw_path")
                # Without raw_path (some test clients) the decoded path is all there is:
                # encode it again, so handlers decode exactly once either way.
                undecoded = (
                    raw.decode("latin-1").split("?", 1)[0]
                    if isinstance(raw, bytes | bytearray)
                    else urllib.parse.quote(path)
                )
                match = _RUN_PATH.match(undecoded)
                if match is not None:
                    prefix, segment, suffix = match.groups()
                    encoded = urllib.parse.quote(urllib.parse.unquote(segment), safe="")
                    scope = dict(scope)  # type: ignore[assignment]
                    scope["path"] = f"{prefix}{encoded}{suffix or ''}"
        await self.app(scope, receive, send)
