"""OTLP/HTTP trace receiver: `POST /v1/traces` in protobuf or JSON, gzip/deflate bodies;
`POST /v1/logs` for the GenAI events instrumentations send as log records, taken alike.

The content type is checked here; admission, reading, decoding and storing are the
receiver pipeline's (`faultfinder/server/receiver.py`, which OTLP/gRPC calls too), and its
errors are answered from `faultfinder/server/errors.py`'s table. Errors follow the
OTLP/HTTP spec: 400 for undecodable bodies (not retryable), 415 for other content types,
413 over the size limits, 503 with Retry-After when the ingest queue is full, too many
request bytes are being received at once, or the store is too slow (retryable).

Memory stays bounded whatever the offered load: a request is refused before its body is
buffered when the queue, counting the requests already let in and still being read or
decoded, has no room for it, or its declared length would pass `ingest_inflight_bytes`
(its body is read and dropped chunk by chunk, so the connection stays usable); bytes are
counted against that limit as they arrive (a chunked body too), so a body that would pass
it is refused part-way; a request waiting for the writer holds only its decoded spans,
which the queue limit counts. A body slower than `body_read_timeout` gets 408, so slow
senders hold neither memory nor a share of the limit for long, and a declared length
reserves nothing until its bytes come. Refused senders are told to come back after
about the time ingest needs to take those already waiting (`faultfinder/server/admission.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import orjson
from google.rpc import status_pb2
from litestar import Controller, MediaType, Request, Response, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.exceptions import HTTPException

from faultfinder.conventions import PROJECT_HEADER
from faultfinder.server.admission import ArrivingBody, IngestAdmission
from faultfinder.server.errors import (
    BodyTimeoutError,
    Refused,
    ServerError,
    answer_for,
)
from faultfinder.server.otlp.decode import encode_response
from faultfinder.server.receiver import Export, Receiver
from faultfinder.server.settings import Settings

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


def _status_body(code: int, message: str, *, as_json: bool) -> bytes:
    """A google.rpc.Status, the error body OTLP/HTTP prescribes, in the request's encoding."""
    status = status_pb2.Status(code=code, message=message)
    if as_json:
        from google.protobuf import json_format

        text: str = json_format.MessageToJson(status)
        return text.encode()
    body: bytes = status.SerializeToString()
    return body


def _content_length(request: Request[None, None, State]) -> int | None:
    value = request.headers.get("content-length")
    if value is None or not value.isdigit():
        return None
    return int(value)


class _StreamedBody:
    """One request's body, its bytes (and the spans they carry) counted against the
    ingest limits chunk by chunk as it arrives (`ArrivingBody`; `faultfinder/server/receiver.py`'s
    `Body`); `release` gives the counts back."""

    counted = True

    def __init__(
        self, request: Request[None, None, State], admission: IngestAdmission, settings: Settings
    ) -> None:
        self._request = request
        self._arriving = ArrivingBody(admission)
        self._settings = settings
        self.declared = _content_length(request) or 0
        self.complete = False
        """Whether the whole body was read (a refused one is read and dropped after)."""

    async def read(self) -> bytes:
        """The whole body; `BodyStalled` when no byte came for the progress timeout,
        TimeoutError after the body read timeout, `InflightFull` when the next chunk would
        pass the in-flight limit."""
        body = await self._arriving.read(
            self._request.stream(),
            timeout=self._settings.body_read_timeout,
            progress_timeout=self._settings.body_progress_timeout,
        )
        self.complete = True
        return body

    def release(self) -> None:
        self._arriving.release()


async def _discard_body(request: Request[None, None, State], timeout: float) -> bool:
    """Read a refused request's body without keeping it, so the connection can carry the
    next request (closing it unread could reset it before the client reads the 503).
    False when it did not end within `timeout` seconds: the answer then closes the
    connection, so a sender that never finishes holds nothing."""
    with anyio.move_on_after(timeout):
        try:
            async for _ in request.stream():
                pass
        except HTTPException:
            pass  # over the size limit: the server closes the connection after answering
        return True
    return False


@dataclass(frozen=True, slots=True)
class IngestServices:
    """What the OTLP/HTTP receiver uses, as one dependency: Litestar resolves two or more
    dependencies of a handler in a task group of their own, a cost paid on every request
    (a fifth of the event loop's time when refusing requests under overload)."""

    settings: Settings
    receiver: Receiver


class OtlpTraceController(Controller):
    path = "/v1/traces"
    tags = ("otlp",)

    @post(
        operation_id="exportTraces",
        summary="OTLP/HTTP trace export (protobuf or JSON)",
        status_code=200,
        opt={"ingest": True},
    )
    async def export(
        self,
        request: Request[None, None, State],
        ingest: NamedDependency[IngestServices],
    ) -> Response[bytes]:
        return await _export(request, ingest, logs=False)


class OtlpLogsController(Controller):
    """`POST /v1/logs`: the GenAI events instrumentations send as log records
    (`faultfinder/server/otlp/log_events.py`), taken like spans (same limits, queue and replies);
    other log records are accepted and not kept."""

    path = "/v1/logs"
    tags = ("otlp",)

    @post(
        operation_id="exportLogs",
        summary="OTLP/HTTP log export (protobuf or JSON): GenAI events",
        status_code=200,
        opt={"ingest": True},
    )
    async def export(
        self,
        request: Request[None, None, State],
        ingest: NamedDependency[IngestServices],
    ) -> Response[bytes]:
        return await _export(request, ingest, logs=True)


async def _export(
    request: Request[None, None, State], ingest: IngestServices, *, logs: bool
) -> Response[bytes]:
    """One OTLP/HTTP export: the content type here, the rest in the receiver pipeline;
    its answer (or error) put on the wire."""
    settings, receiver = ingest.settings, ingest.receiver
    content_type = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
    if content_type not in (PROTOBUF, JSON):
        detail = f"unsupported content type {content_type or '(none)'!r}; send {PROTOBUF} or {JSON}"
        return Response(
            orjson.dumps({"detail": detail}), status_code=415, media_type=MediaType.JSON
        )
    as_json = content_type == JSON
    body = _StreamedBody(request, receiver.admission, settings)
    export = Export(
        logs=logs,
        as_json=as_json,
        content_encoding=request.headers.get("content-encoding"),
        project_header=request.headers.get(PROJECT_HEADER),
    )
    try:
        stored = await receiver.export(export, body)
    except ServerError as exc:
        return await _error(request, exc, body, settings, as_json=as_json)
    return Response(
        encode_response(stored.rejected, stored.error_message, as_json=as_json),
        status_code=200,
        media_type=JSON if as_json else PROTOBUF,
    )


async def _error(
    request: Request[None, None, State],
    exc: ServerError,
    body: _StreamedBody,
    settings: Settings,
    *,
    as_json: bool,
) -> Response[bytes]:
    """The pipeline's error as OTLP/HTTP answers it: its status from `answer_for`, a
    google.rpc.Status body; Retry-After on a refusal (exporters retry), whose unread body
    is read and dropped first; the connection closed after a body that did not come."""
    answer = answer_for(exc)
    headers: dict[str, str] = {}
    if isinstance(exc, Refused):
        headers["Retry-After"] = str(exc.seconds)
        if not body.complete and not await _discard_body(request, settings.body_read_timeout):
            headers["Connection"] = "close"
    elif isinstance(exc, BodyTimeoutError):
        headers["Connection"] = "close"
    return Response(
        _status_body(answer.grpc_code, str(exc), as_json=as_json),
        status_code=answer.http_status,
        media_type=JSON if as_json else PROTOBUF,
        headers=headers or None,
    )
