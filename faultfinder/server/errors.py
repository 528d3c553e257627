"""The server part's exceptions, one tree so that each maps to one HTTP/gRPC answer.

    ServerError                       base of everything the server raises on purpose
    └── RequestError                  the client sent something we cannot take (not retryable)
        ├── DecodeError(ValueError)   undecodable OTLP body: bad protobuf/JSON/ids → 400
        │   └── UnsupportedEncodingError   unknown Content-Encoding → 400
        └── BodyTooLargeError         body larger than allowed once decompressed → 413
            └── TooManySpansError     more spans in one request than allowed → 413

Retryable conditions (a full ingest queue, a slow store) live beside the ingest
pipeline in `faultfinder/server/ingest.py` and answer 503.
"""

from __future__ import annotations

__all__ = [
    "BodyTooLargeError",
    "DecodeError",
    "RequestError",
    "ServerError",
    "TooManySpansError",
    "UnsupportedEncodingError",
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

    def __init__(self, spans: int, limit: int) -> None:
        RequestError.__init__(
            self, f"request holds {spans} spans, more than the {limit} one request may carry"
        )
        self.limit = limit
        self.spans = spans

    def __reduce__(self) -> tuple[type[TooManySpansError], tuple[int, int]]:  # type: ignore[override]
        return (type(self), (self.spans, self.limit))
