"""The HTTP side both clients share: where the sidecar is, what every request carries,
and how an answer becomes a result or a `FaultfinderError`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, TypeVar

import httpx

from faultfinder import __version__
from faultfinder.sdk.calls import Call
from faultfinder.sdk.errors import (
    APIError,
    AuthError,
    NotFoundError,
    ResponseError,
    ServerBusyError,
    TransportError,
    ValidationError,
)
from faultfinder.sdk.export import API_KEY_VARIABLE, ENDPOINT_VARIABLE

DEFAULT_BASE_URL = "http://127.0.0.1:4318"
"""The local sidecar (it serves the API on its OTLP/HTTP port)."""

T = TypeVar("T")


def resolve_base_url(base_url: str | None) -> str:
    url = base_url or os.environ.get(ENDPOINT_VARIABLE, "").strip() or DEFAULT_BASE_URL
    if not url.startswith(("http://", "https://")):
        source = "base_url" if base_url else ENDPOINT_VARIABLE
        raise ValueError(f"{source}: {url!r} is not an http(s) URL such as {DEFAULT_BASE_URL}")
    return url.rstrip("/")


def request_headers(api_key: str | None, headers: Mapping[str, str] | None) -> dict[str, str]:
    merged = {"user-agent": f"faultfinder-sdk/{__version__}", "accept": "application/json"}
    api_key = api_key or os.environ.get(API_KEY_VARIABLE, "").strip() or None
    if api_key:
        merged["authorization"] = f"Bearer {api_key}"
    merged.update(headers or {})
    return merged


def _error_detail(response: httpx.Response) -> str:
    """The server's explanation: the informative parts of a Problem Details body."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:500] or response.reason_phrase
    if not isinstance(body, dict):
        return json.dumps(body)[:500]
    try:
        phrase = HTTPStatus(response.status_code).phrase
    except ValueError:
        phrase = response.reason_phrase
    texts = [str(body[key]) for key in ("title", "detail") if body.get(key)]
    # Litestar puts its message in `title` or `detail` and the bare status phrase in the other.
    informative = [text for text in dict.fromkeys(texts) if text.lower() != phrase.lower()]
    detail = ": ".join(informative) or (texts[0] if texts else phrase)
    problems = []
    extra = body.get("extra")
    if isinstance(extra, list):
        for item in extra:
            if isinstance(item, dict) and item.get("message"):
                key = item.get("key")
                problems.append(f"{key}: {item['message']}" if key else str(item["message"]))
    return f"{detail} ({'; '.join(problems)})" if problems else detail


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers.get("retry-after", ""))
    except ValueError:
        return None


def _checked(response: httpx.Response) -> Any:
    """The decoded JSON body of a 2xx response (None when empty); errors raised by status."""
    method, url = response.request.method, str(response.request.url)
    status = response.status_code
    if not response.is_success:
        detail = _error_detail(response)
        if status in (401, 403):
            raise AuthError(status, detail, method=method, url=url)
        if status == 404:
            raise NotFoundError(status, detail, method=method, url=url)
        if status in (400, 409, 422):
            raise ValidationError(status, detail, method=method, url=url)
        if status in (429, 503):
            raise ServerBusyError(
                status, detail, method=method, url=url, retry_after=_retry_after(response)
            )
        raise APIError(status, detail, method=method, url=url)
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        raise ResponseError(
            f"{method} {url} answered {status} with a body that is not JSON"
        ) from None


def answer(call: Call[T], response: httpx.Response) -> T:
    """The call's result read from the response, or the error the response stands for."""
    return call.read(_checked(response))


def unreachable(call: Call[Any], base_url: str, exc: httpx.TransportError) -> TransportError:
    """The error for a call that got no answer at all."""
    return TransportError(f"{call.method} {base_url}{call.path}: {type(exc).__name__}: {exc}")
