"""What the HTTP server refuses before any handler runs, so that a web page the sidecar's
user visits can neither write to it nor read it, keys or none.

- **Host names**: only those the sidecar is configured for (`allowed_hosts`; the loopback
  names by default) are served, so a page whose own name was re-pointed at 127.0.0.1
  (DNS rebinding) gets 400, not the runs.
- **Cross-site writes**: a state-changing request must come from the sidecar's own origin
  or from no page at all (`Sec-Fetch-Site`, else `Origin`): 403 otherwise.
- **JSON writes**: a write to the API must be `application/json`, which a page of another
  origin cannot send without a CORS preflight this server never grants (415 otherwise);
  OTLP ingest checks its own types (protobuf or JSON).
- **JSON nesting**: a JSON body nested deeper than `MAX_JSON_DEPTH` is refused (400) before
  it is validated or stored: the serialisers that would later write or read it back stop
  at 254 levels, and a value stored deeper could never be served again.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable
from typing import Any

import orjson
from litestar import Request
from litestar.enums import ScopeType
from litestar.exceptions import ClientException
from litestar.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "LOOPBACK_NAMES",
    "MAX_JSON_DEPTH",
    "BoundedJsonRequest",
    "HttpGuard",
    "cross_origin_refusal",
    "host_refusal",
    "json_depth",
    "served_hosts",
]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
"""The host names served when none are configured."""

MAX_JSON_DEPTH = 64
"""Most levels of nesting (objects and arrays) a JSON request body may have."""

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SAME_ORIGIN_FETCH = frozenset({b"same-origin", b"none"})


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


def _host_name(host: str) -> str:
    """`host` (a Host header or an origin's netloc) without its port, lower-case; an IPv6
    literal without its brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def served_hosts(configured: Iterable[str], bound: str) -> tuple[str, ...]:
    """The host names to serve: those configured, else the loopback names and the address
    the server binds to (unless that is every address: 0.0.0.0 or ::)."""
    configured = tuple(configured)
    if configured:
        return configured
    extra = () if bound in ("0.0.0.0", "::", "") else (bound,)
    return (*LOOPBACK_NAMES, *extra)


def host_refusal(scope: Scope, allowed: frozenset[str]) -> str | None:
    """Why a request's Host is not served, or None. `*` in `allowed` serves any; a request
    without a Host (HTTP/1.0, not a browser) is served."""
    if "*" in allowed:
        return None
    host = _header(scope, b"host")
    if host is None or _host_name(host.decode("latin-1")) in allowed:
        return None
    return f"host {host.decode('latin-1')!r} is not served here (FAULTFINDER_ALLOWED_HOSTS)"


def cross_origin_refusal(scope: Scope) -> tuple[int, str] | None:
    """Why a state-changing request is refused as coming from another site, or None.

    A browser tells where a request comes from: `Sec-Fetch-Site` (`same-origin`, or `none`
    for one the user typed), else `Origin`, which must then name the request's own host.
    Requests from other programs carry neither and pass. A browser attaches a SameSite
    cookie to requests from every page of the same *site*, other ports of the same host
    included, so same-site is not enough. Writes to the API must be JSON besides.
    """
    site = _header(scope, b"sec-fetch-site")
    if site is not None and site.strip().lower() not in _SAME_ORIGIN_FETCH:
        return 403, f"cross-site request refused (Sec-Fetch-Site: {site.decode('latin-1')})"
    origin = _header(scope, b"origin")
    if site is None and origin is not None:
        host = _header(scope, b"host") or b""
        parsed = urllib.parse.urlsplit(origin.decode("latin-1"))
        if parsed.netloc.lower() != host.decode("latin-1").lower():
            return 403, f"cross-origin request refused (Origin: {origin.decode('latin-1')})"
    path: str = scope.get("path", "")
    if path.startswith("/api/"):
        content_type = (_header(scope, b"content-type") or b"").split(b";")[0].strip().lower()
        if content_type != b"application/json":
            return 415, "writes to the API must be application/json"
    return None


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = orjson.dumps({"status_code": status, "detail": detail})
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


class HttpGuard:
    """ASGI middleware: unknown Host names get 400, cross-site or non-JSON writes 403/415
    (see the module's docstring). `allowed_hosts` are names without ports; `*` serves any."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str]) -> None:
        self.app = app
        self.allowed_hosts = frozenset(_host_name(host) for host in allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:  # lifespan; the sidecar serves no websockets
            await self.app(scope, receive, send)
            return
        host_problem = host_refusal(scope, self.allowed_hosts)
        if host_problem is not None:
            await _refuse(send, 400, host_problem)
            return
        method = scope.get("method")  # none on a websocket
        if method is not None and method not in SAFE_METHODS:
            refusal = cross_origin_refusal(scope)
            if refusal is not None:
                await _refuse(send, *refusal)
                return
        await self.app(scope, receive, send)


def json_depth(value: Any, limit: int) -> int:
    """How deeply `value` nests objects and arrays, counted up to `limit + 1` (no further):
    without recursion, so it cannot be what overflows."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if not isinstance(item, dict | list):
            continue
        deepest = max(deepest, depth)
        if depth > limit:
            return depth
        children = item.values() if isinstance(item, dict) else item
        pending.extend((child, depth + 1) for child in children)
    return deepest


class BoundedJsonRequest(Request[Any, Any, Any]):
    """A request whose JSON body is refused (400) when it nests deeper than
    `MAX_JSON_DEPTH`, before any handler or model sees it."""

    async def json(self) -> Any:
        value = await super().json()
        if json_depth(value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
            raise ClientException(f"the JSON body is nested more than {MAX_JSON_DEPTH} levels deep")
        return value
