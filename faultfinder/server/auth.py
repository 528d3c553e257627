"""Optional API keys: separate keys for ingest and for queries, on HTTP and gRPC.

A request presents a key as `Authorization: Bearer KEY` (also what OTLP exporters
send through `OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer KEY`) or `x-api-key: KEY`.
Ingest (`/v1/traces`, gRPC Export) accepts ingest keys and API keys; everything else
under `/api` accepts API keys only. With no keys configured, auth is off. Keys are
compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException
from litestar.handlers.base import BaseRouteHandler

OPEN_PATHS = ("/healthz", "/readyz")


def presented_key(authorization: str | None, api_key: str | None) -> str | None:
    """The key a request carries, from `Authorization: Bearer …` or `x-api-key`."""
    if authorization:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    if api_key and api_key.strip():
        return api_key.strip()
    return None


def key_matches(presented: str | None, keys: Iterable[str]) -> bool:
    """Constant-time check of `presented` against every configured key."""
    if presented is None:
        return False
    candidate = presented.encode()
    matched = False
    for key in keys:
        # No early exit: the time taken does not depend on which key matched.
        matched |= hmac.compare_digest(candidate, key.encode())
    return matched


class KeyRing:
    """The configured keys and who may do what with them."""

    def __init__(self, api_keys: Iterable[str], ingest_keys: Iterable[str]) -> None:
        self.api_keys = tuple(k for k in api_keys if k)
        self.ingest_keys = tuple(k for k in ingest_keys if k)

    @property
    def enabled(self) -> bool:
        return bool(self.api_keys or self.ingest_keys)

    def may_ingest(self, key: str | None) -> bool:
        return not self.enabled or key_matches(key, (*self.ingest_keys, *self.api_keys))

    def may_query(self, key: str | None) -> bool:
        return not self.enabled or key_matches(key, self.api_keys)


async def require_key(connection: ASGIConnection, handler: BaseRouteHandler) -> None:  # type: ignore[type-arg]
    """Litestar guard: ingest routes need an ingest or API key, the rest an API key."""
    keys: KeyRing = connection.app.state.keyring
    if not keys.enabled or connection.url.path in OPEN_PATHS:
        return
    key = presented_key(
        connection.headers.get("authorization"), connection.headers.get("x-api-key")
    )
    allowed = keys.may_ingest(key) if handler.opt.get("ingest") else keys.may_query(key)
    if not allowed:
        raise NotAuthorizedException("a valid API key is required (Authorization: Bearer KEY)")
