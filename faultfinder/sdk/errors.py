"""Errors raised by the agent-side SDK: configuration, transport and query-API failures.

FaultfinderError
├── ConfigurationError      configure() got an unusable endpoint, protocol or header
├── TransportError          the sidecar could not be reached, or did not answer in time
├── ResponseError           the sidecar answered with a body this client cannot read
├── WaitTimeoutError        wait_for_run() / wait_for_job() ran out of time
└── APIError(status, detail)    the sidecar answered with an error status
    ├── AuthError               401 / 403: missing or wrong API key
    ├── NotFoundError           404: no such run (or endpoint)
    ├── ValidationError         400 / 409 / 422: the request was refused as invalid
    └── ServerBusyError         429 / 503: try again after `retry_after` seconds
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "APIError",
    "AuthError",
    "ConfigurationError",
    "FaultfinderError",
    "NotFoundError",
    "ResponseError",
    "ServerBusyError",
    "TransportError",
    "ValidationError",
    "WaitTimeoutError",
]


class FaultfinderError(Exception):
    """Base of every error the SDK raises."""


class ConfigurationError(FaultfinderError, ValueError):
    """An argument or environment variable given to `configure()` is unusable."""


class TransportError(FaultfinderError):
    """The request never got an answer: connection refused, DNS failure, timeout."""


class ResponseError(FaultfinderError):
    """The sidecar answered 2xx with a body that does not have the documented shape."""


class WaitTimeoutError(FaultfinderError, TimeoutError):
    """A wait ran out of time; `last_status` is what was last seen (None: never seen)."""

    def __init__(
        self, subject: str, wanted: Iterable[str], last_status: str | None, timeout: float
    ) -> None:
        self.subject = subject
        self.wanted = tuple(sorted(wanted))
        self.last_status = last_status
        self.timeout = timeout
        seen = f"it is {last_status!r}" if last_status else "the sidecar has not seen it"
        super().__init__(
            f"{subject} did not become {' or '.join(self.wanted)} within {timeout:g} s ({seen})"
        )


class APIError(FaultfinderError):
    """The sidecar answered with an HTTP error status; `detail` is its explanation."""

    def __init__(self, status: int, detail: str, *, method: str = "", url: str = "") -> None:
        self.status = status
        self.detail = detail
        self.method = method
        self.url = url
        where = f"{method} {url} " if method or url else ""
        super().__init__(f"{where}answered {status}: {detail}")


class AuthError(APIError):
    """401 / 403: the API key is missing or not accepted."""


class NotFoundError(APIError):
    """404: the run (or the endpoint) does not exist."""


class ValidationError(APIError):
    """400 / 409 / 422: the request was refused as invalid; `detail` says which field."""


class ServerBusyError(APIError):
    """429 / 503: the sidecar is saturated; retry after `retry_after` seconds when given."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        method: str = "",
        url: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(status, detail, method=method, url=url)
        self.retry_after = retry_after
