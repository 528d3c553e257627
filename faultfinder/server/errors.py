"""The server part's exceptions, one tree, and the one table that maps each to its answer.

    ServerError                        base of everything the server raises on purpose → 500
    ├── RequestError                   the client sent something we cannot take (not retryable)
    │   ├── DecodeError(ValueError)    undecodable OTLP body: bad protobuf/JSON/ids → 400
    │   │   └── UnsupportedEncodingError   unknown Content-Encoding → 400
    │   ├── BodyTooLargeError          body larger than allowed once decompressed → 413
    │   │   └── TooManySpansError      more spans in one request than allowed → 413
    │   ├── BodyTimeoutError           the body did not arrive in time → 408
    │   ├── InvalidCursorError(ValueError)   a listing cursor we did not hand out → 400
    │   └── NotFoundError(LookupError) what the request names is not stored → 404
    │       ├── UnknownRunError        no such run
    │       └── UnknownBenchEntryError no such benchmark history entry
    ├── RetryableError                 ingest cannot take it now; send it again later → 503
    │   ├── Refused                    refused, with the wait to advise (Retry-After, RetryInfo)
    │   ├── IngestSaturatedError       the writer's queue is full
    │   └── IngestUnavailableError     the spans were not stored in time (database down, slow)
    ├── ConfigurationError(ValueError) the operator's settings: the sidecar does not start
    │   ├── SettingsError              a setting has an invalid value
    │   └── DatabaseURLError           the database URL is not one the store can use
    └── InternalSignal                 control flow inside one module, never answered:
        │                              `ingest._GaveUp`, `store.spans._SomeStoredAlready`
        └── InflightFull               a body would pass the in-flight byte limit (→ Refused)

`ANSWERS` maps each class once to its HTTP status (and Problem Details title) and its gRPC
status code; `answer_for(exc)` finds the nearest class of an exception there. The OTLP
receivers (HTTP and gRPC, through `faultfinder/server/receiver.py`) and the API's
exception handler (`app.py`) all answer from it. The classes are defined here so that
the table can name them; each is re-exported where it is raised (`store`, `ingest`,
`admission`, `settings`, `db.engine`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "ANSWERS",
    "Answer",
    "BodyTimeoutError",
    "BodyTooLargeError",
    "ConfigurationError",
    "DatabaseURLError",
    "DecodeError",
    "InflightFull",
    "IngestSaturatedError",
    "IngestUnavailableError",
    "InternalSignal",
    "InvalidCursorError",
    "NotFoundError",
    "Refused",
    "RequestError",
    "RetryableError",
    "ServerError",
    "SettingsError",
    "TooManySpansError",
    "UnknownBenchEntryError",
    "UnknownRunError",
    "UnsupportedEncodingError",
    "answer_for",
]


class ServerError(Exception):
    """Base of the server's deliberate exceptions."""


class RequestError(ServerError):
    """The request itself is at fault; sending it again will not help."""


class DecodeError(RequestError, ValueError):
    """An OTLP request body cannot be decoded; the message says where it went wrong."""


class UnsupportedEncodingError(DecodeError):
    """The body uses a Content-Encoding other than gzip, deflate or identity."""


class BodyTooLargeError(RequestError):
    """The body exceeds the size limit after decompression (a zip bomb, or simply too big)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds {limit} bytes once decompressed")
        self.limit = limit

    def __reduce__(self) -> tuple[type[BodyTooLargeError], tuple[int]]:
        # Raised in a decoder process (`serve --processes`), it arrives here pickled.
        return (type(self), (self.limit,))


class TooManySpansError(BodyTooLargeError):
    """One request holds more spans than a request may (however small they are)."""

    def __init__(self, spans: int, limit: int, *, counted: str = "spans") -> None:
        """`counted`: what `spans` numbers ("spans", or e.g. "spans, events and links"
        when a request was refused for the items inside its spans, or "at least … spans"
        when counting stopped early)."""
        RequestError.__init__(
            self, f"request holds {spans} {counted}, more than the {limit} one request may carry"
        )
        self.limit = limit
        self.spans = spans
        self.counted = counted

    def __reduce__(self) -> tuple[Any, ...]:
        return (_too_many_spans, (self.spans, self.limit, self.counted))


def _too_many_spans(spans: int, limit: int, counted: str) -> TooManySpansError:
    """`TooManySpansError` again, from a decoder process's pickle."""
    return TooManySpansError(spans, limit, counted=counted)


class BodyTimeoutError(RequestError):
    """A request's body did not arrive within the body read timeout (a slow sender)."""


class InvalidCursorError(RequestError, ValueError):
    """A `cursor` passed to `list_runs` is not one it returned."""


class NotFoundError(RequestError, LookupError):
    """What the request names is not stored."""


class UnknownRunError(NotFoundError):
    """No run with the given id is stored."""


class UnknownBenchEntryError(NotFoundError):
    """No history entry has the given id."""


class RetryableError(ServerError):
    """Ingest cannot take the request now; the same request may succeed later."""


class Refused(RetryableError):
    """Ingest cannot take a request now: the sender is to come back after `seconds`."""

    def __init__(self, message: str, seconds: int) -> None:
        super().__init__(message)
        self.seconds = seconds


class IngestSaturatedError(RetryableError):
    """The queue is full: the caller should retry later."""


class IngestUnavailableError(RetryableError):
    """The spans could not be stored in time (database down or too slow)."""


class ConfigurationError(ServerError, ValueError):
    """The sidecar is configured so that it cannot start; the message names what to fix."""


class SettingsError(ConfigurationError):
    """A setting has an invalid value; the message names the setting and its variable."""


class DatabaseURLError(ConfigurationError):
    """The database URL is not one the span store can use."""


class InternalSignal(ServerError):
    """Control flow within one module; caught there and never answered to a client."""


class InflightFull(InternalSignal):
    """A body's bytes would pass the in-flight limit while it was being received."""


class BodyStalled(InternalSignal):
    """No byte of a body arrived for the body progress timeout: the sender stalled."""


@dataclass(frozen=True, slots=True)
class Answer:
    """How a transport answers an exception: HTTP status and Problem Details title, and
    the gRPC status code (`google.rpc.Code` numbering, which `grpc.StatusCode` shares)."""

    http_status: int
    title: str
    grpc_code: int


OK = 0
DEADLINE_EXCEEDED = 4
INVALID_ARGUMENT = 3
NOT_FOUND = 5
RESOURCE_EXHAUSTED = 8
INTERNAL = 13
UNAVAILABLE = 14

ANSWERS: dict[type[ServerError], Answer] = {
    ServerError: Answer(500, "Internal Server Error", INTERNAL),
    RequestError: Answer(400, "Bad Request", INVALID_ARGUMENT),
    DecodeError: Answer(400, "Bad Request", INVALID_ARGUMENT),
    BodyTooLargeError: Answer(413, "Request Entity Too Large", RESOURCE_EXHAUSTED),
    BodyTimeoutError: Answer(408, "Request Timeout", DEADLINE_EXCEEDED),
    InvalidCursorError: Answer(400, "Bad Request", INVALID_ARGUMENT),
    NotFoundError: Answer(404, "Not Found", NOT_FOUND),
    RetryableError: Answer(503, "Service Unavailable", UNAVAILABLE),
    ConfigurationError: Answer(500, "Internal Server Error", INTERNAL),
}
"""Each class's answer; a class not listed answers as its nearest listed base."""


def answer_for(exc: BaseException) -> Answer:
    """The answer to `exc`: that of the nearest of its classes in `ANSWERS` (500 for an
    exception outside the tree)."""
    for cls in type(exc).__mro__:
        answer = ANSWERS.get(cls)  # type: ignore[call-overload]
        if answer is not None:
            return answer
    return ANSWERS[ServerError]
