"""What every OTLP/HTTP client here shares (the dataset replay, the ingest load test, the
drills): the content types, the traces endpoint's URL and how long a `Retry-After` says
to wait."""

from __future__ import annotations

import datetime
import email.utils
import time

__all__ = [
    "JSON_CONTENT_TYPE",
    "OTLP_TRACES_PATH",
    "PROTOBUF_CONTENT_TYPE",
    "retry_after_seconds",
    "traces_url",
]

OTLP_TRACES_PATH = "/v1/traces"
"""Path of the OTLP/HTTP traces endpoint, relative to the server's base URL."""
PROTOBUF_CONTENT_TYPE = "application/x-protobuf"
JSON_CONTENT_TYPE = "application/json"


def traces_url(base: str) -> str:
    """`<base>/v1/traces`, unless `base` already names the traces endpoint."""
    base = base.rstrip("/")
    return base if base.endswith(OTLP_TRACES_PATH) else base + OTLP_TRACES_PATH


def retry_after_seconds(value: str | None, *, default: float, cap: float = 60.0) -> float:
    """Seconds to wait per a `Retry-After` header (delay-seconds or HTTP date), capped."""
    if not value:
        return default
    value = value.strip()
    if value.isdigit():
        return min(float(value), cap)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return default
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return min(max(when.timestamp() - time.time(), 0.0), cap)
