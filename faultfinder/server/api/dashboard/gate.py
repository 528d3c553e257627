"""The dashboard's key gate: a browser presents its API key once on the login page; the
HttpOnly cookie it then carries becomes the `Authorization` header the API checks, and
only same-origin requests may write through it (JSON only, on the API: the rule
`faultfinder/server/http_guard.py` applies to every request)."""

from __future__ import annotations

import re
import urllib.parse
from http.cookies import CookieError, SimpleCookie

import orjson
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from faultfinder.server.events import RUN_CHANGED, EventBus
from faultfinder.server.http_guard import SAFE_METHODS, cross_origin_refusal

KEY_COOKIE = "faultfinder_key"
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
LOGIN_CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = orjson.dumps({"status_code": status, "detail": detail})
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _authorised_by_cookie(scope: Scope) -> tuple[Scope, tuple[int, str] | None]:
    """`scope` with the login cookie's key as its `Authorization` header (when it carries
    no key of its own), and the refusal of a cross-origin write made with it."""
    if _header(scope, b"authorization") is not None or _header(scope, b"x-api-key") is not None:
        return scope, None
    key = cookie_key(scope)
    if not key:
        return scope, None
    method = scope.get("method")  # none on a websocket
    if method is not None and method not in SAFE_METHODS:
        refusal = cross_origin_refusal(scope)
        if refusal is not None:
            return scope, refusal
    bearer = (b"authorization", b"Bearer " + key.encode("latin-1", "replace"))
    return {**scope, "headers": [*scope.get("headers", ()), bearer]}, None  # type: ignore[return-value]


_API_WRITE = re.compile(r"^/api/runs/([^/]+)/(labels|outcome|attributions)$")


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


def cookie_key(scope: Scope) -> str | None:
    """The API key the dashboard's login stored in the browser's cookie, if any."""
    raw = _header(scope, b"cookie")
    if raw is None:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw.decode("latin-1"))
    except CookieError:
        return None
    morsel = jar.get(KEY_COOKIE)
    return urllib.parse.unquote(morsel.value) if morsel is not None and morsel.value else None


class DashboardGate:
    """ASGI middleware for the dashboard.

    - A request without `Authorization`/`x-api-key` but with the login cookie gets the
      cookie's key as `Authorization: Bearer …`; the API guard then checks it as usual.
      If it changes state, it must come from the dashboard's own origin
      (`cross_origin_refusal`): 403 (or 415 for a non-JSON API write) otherwise.
    - `/ui` responses get a strict Content-Security-Policy and related headers.
    - Successful writes to `/api/runs/{id}/labels|outcome|attributions` are published on
      the event bus, so open dashboards refresh.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        scope, refusal = _authorised_by_cookie(scope)
        if refusal is not None:
            await _refuse(send, *refusal)
            return
        path: str = scope.get("path", "")
        write = _API_WRITE.match(path) if scope.get("method") == "POST" else None
        dashboard = path == "/ui" or path.startswith("/ui/")
        if not write and not dashboard:
            await self.app(scope, receive, send)
            return

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                if dashboard:
                    headers = list(message.get("headers", []))
                    names = {bytes(name).lower() for name, _ in headers}
                    for name, value in (
                        (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
                        (b"x-content-type-options", b"nosniff"),
                        (b"referrer-policy", b"same-origin"),
                        (b"x-frame-options", b"DENY"),
                    ):
                        if name not in names:
                            headers.append((name, value))
                    message = {**message, "headers": headers}  # type: ignore[typeddict-item]
                if write and 200 <= message["status"] < 300:
                    bus: EventBus | None = getattr(scope["app"].state, "events", None)
                    if bus is not None:
                        run_id = urllib.parse.unquote(write.group(1))
                        bus.publish(RUN_CHANGED, {"run_id": run_id, "change": write.group(2)})
            await send(message)

        await self.app(scope, receive, send_wrapper)
