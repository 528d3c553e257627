"""Webhooks: POST each new attribution to configured URLs, signed, retried with backoff.

The body is the JSON event; `X-Faultfinder-Signature: sha256=<hex>` is the HMAC-SHA256
of the exact body with the shared secret, so receivers can verify the sender.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import Sequence
from typing import Any

import httpx
import orjson

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Faultfinder-Signature"


def sign(body: bytes, secret: str) -> str:
    """The signature header value for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(body: bytes, secret: str, header: str) -> bool:
    """Whether `header` is the signature of `body` (constant-time comparison)."""
    return hmac.compare_digest(sign(body, secret), header)


class WebhookSender:
    """Daemon that delivers events in the background; `async with WebhookSender(...)`."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        secret: str | None,
        attempts: int = 5,
        backoff_s: float = 1.0,
        timeout_s: float = 10.0,
    ) -> None:
        self._urls = list(urls)
        self._secret = secret
        self._attempts = attempts
        self._backoff_s = backoff_s
        self._timeout_s = timeout_s
        self._client: httpx.AsyncClient | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self.delivered = 0
        self.failed = 0

    async def __aenter__(self) -> WebhookSender:
        self._client = httpx.AsyncClient(timeout=self._timeout_s)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # Give deliveries in flight a moment, then stop.
        if self._pending:
            await asyncio.wait(self._pending, timeout=self._timeout_s)
        for task in self._pending:
            task.cancel()
        if self._client is not None:
            await self._client.aclose()

    def publish(self, event: str, data: dict[str, Any]) -> None:
        """Queue `event` for every URL; returns at once."""
        if not self._urls or self._client is None:
            return
        body = orjson.dumps({"event": event, "sent_at": time.time(), "data": data})
        for url in self._urls:
            task = asyncio.create_task(self._deliver(url, event, body))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _deliver(self, url: str, event: str, body: bytes) -> None:
        assert self._client is not None
        headers = {"content-type": "application/json", "x-faultfinder-event": event}
        if self._secret:
            headers[SIGNATURE_HEADER] = sign(body, self._secret)
        delay = self._backoff_s
        for attempt in range(1, self._attempts + 1):
            try:
                response = await self._client.post(url, content=body, headers=headers)
                if response.status_code < 300:
                    self.delivered += 1
                    return
                problem = f"HTTP {response.status_code}"
                if 400 <= response.status_code < 500 and response.status_code not in (408, 429):
                    break  # the receiver refuses this event; retrying will not help
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            log.warning("webhook %s attempt %d failed: %s", url, attempt, problem)
            if attempt < self._attempts:
                await asyncio.sleep(delay)
                delay *= 2
        self.failed += 1
        log.error("webhook %s gave up on a %s event: %s", url, event, problem)
