"""OTLP/HTTP trace receiver: `POST /v1/traces` in protobuf or JSON, gzip/deflate bodies;
`POST /v1/logs` for the GenAI events instrumentations send as log records, taken alike.

Errors follow the OTLP/HTTP spec: 400 for undecodable bodies (not retryable), 415
for other content types, 413 over the size limits, 503 with Retry-After when the
ingest queue is full, too many request bytes are being received at once, or the store
is too slow (retryable).

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

import time
from dataclasses import dataclass

import anyio
import orjson
from google.rpc import status_pb2
from litestar import Controller, MediaType, Request, Response, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.exceptions import HTTPException

from faultfinder.conventions import PROJECT_HEADER
from faultfinder.server.admission import InflightBytes, IngestAdmission, Refused
from faultfinder.server.errors import TooManySpansError
from faultfinder.server.ingest import SpanWriter
from faultfinder.server.otlp.decode import (
    BodyTooLargeError,
    DecodedBatch,
    DecodeError,
    encode_response,
)
from faultfinder.server.otlp.pool import BodyDecoder, DecodeRequest
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


def _error(
    http_status: int, grpc_code: int, message: str, *, as_json: bool, **headers: str
) -> Response[bytes]:
    return Response(
        _status_body(grpc_code, message, as_json=as_json),
        status_code=http_status,
        media_type=JSON if as_json else PROTOBUF,
        headers=headers or None,
    )


def _content_length(request: Request[None, None, State]) -> int | None:
    value = request.headers.get("content-length")
    if value is None or not value.isdigit():
        return None
    return int(value)


class _InflightFull(Exception):
    """A body's bytes would pass the in-flight limit while it was being received."""


class _Received:
    """One request's body, counted against the in-flight limit chunk by chunk as it
    arrives; `release` gives the count back."""

    def __init__(self, inflight: InflightBytes) -> None:
        self._inflight = inflight
        self.held = 0

    async def read(self, request: Request[None, None, State], timeout: float) -> bytes:
        """The whole body; TimeoutError after `timeout` seconds, `_InflightFull` when the
        next chunk would pass the limit (what arrived so far is dropped)."""
        chunks = bytearray()
        with anyio.fail_after(timeout):
            async for chunk in request.stream():
                if not self._inflight.try_acquire(len(chunk)):
                    raise _InflightFull
                self.held += len(chunk)
                chunks += chunk
        return bytes(chunks)

    def release(self) -> None:
        self._inflight.release(self.held)
        self.held = 0


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


def _busy(inflight: InflightBytes) -> str:
    return f"ingest busy ({inflight.held} request bytes being received, limit {inflight.limit})"


def _refusal(
    writer: SpanWriter, admission: IngestAdmission, declared: int, expected: int, limit: int
) -> str:
    """Why a request must be refused before its body is read, or "" to take it. The
    requests let in and still being read or decoded count as queued already: each would
    otherwise be read and decoded only to find the queue full."""
    message = admission.queue_refusal(writer.queued_spans, expected, limit)
    if message:
        writer.counters.reject_request("saturated")
        return message
    if admission.bytes.would_pass(declared):
        writer.counters.reject_request("inflight")
        return _busy(admission.bytes)
    return ""


def _retry_later(
    message: str, seconds: int, *, as_json: bool, close: bool = False
) -> Response[bytes]:
    """503 UNAVAILABLE with Retry-After: exporters retry."""
    headers = {"Retry-After": str(seconds)}
    if close:
        headers["Connection"] = "close"
    return _error(503, 14, message, as_json=as_json, **headers)


async def _store(
    batch: DecodedBatch,
    writer: SpanWriter,
    admission: IngestAdmission,
    settings: Settings,
    *,
    as_json: bool,
) -> Response[bytes]:
    """Queue a decoded request's spans and answer once they are stored (or why not)."""
    try:
        stored = await admission.store(writer, batch, unavailable_wait=settings.retry_after)
    except Refused as refused:
        return _retry_later(str(refused), refused.seconds, as_json=as_json)
    return Response(
        encode_response(stored.rejected, stored.error_message, as_json=as_json),
        status_code=200,
        media_type=JSON if as_json else PROTOBUF,
    )


@dataclass(frozen=True, slots=True)
class IngestServices:
    """What the OTLP/HTTP receiver uses, as one dependency: Litestar resolves two or more
    dependencies of a handler in a task group of their own, a cost paid on every request
    (a fifth of the event loop's time when refusing requests under overload)."""

    settings: Settings
    writer: SpanWriter
    admission: IngestAdmission
    decoder: BodyDecoder


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
    """One OTLP/HTTP export: admission, body, decoding, then the writer's answer."""
    settings, writer, admission = ingest.settings, ingest.writer, ingest.admission
    content_type = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
    if content_type not in (PROTOBUF, JSON):
        detail = f"unsupported content type {content_type or '(none)'!r}; send {PROTOBUF} or {JSON}"
        return Response(
            orjson.dumps({"detail": detail}), status_code=415, media_type=MediaType.JSON
        )
    as_json = content_type == JSON
    inflight = admission.bytes
    declared = _content_length(request) or 0
    expected = admission.spans_per_byte.estimate(declared)
    # Refuse before buffering or decoding: under a retry storm, bodies held only to be
    # refused would take the memory, and decoding them the CPU, that the writer and
    # the query API need.
    message = _refusal(writer, admission, declared, expected, settings.ingest_queue_spans)
    if message:
        ended = await _discard_body(request, settings.body_read_timeout)
        return _retry_later(message, admission.advice.refused(), as_json=as_json, close=not ended)
    received = _Received(inflight)
    admission.coming_spans += expected
    try:
        try:
            body = await received.read(request, settings.body_read_timeout)
        except TimeoutError:
            writer.counters.reject_request("body_timeout")
            return _error(
                408,
                4,  # DEADLINE_EXCEEDED
                f"the body did not arrive within {settings.body_read_timeout:g} s",
                as_json=as_json,
                connection="close",
            )
        except _InflightFull:
            writer.counters.reject_request("inflight")
            message = _busy(inflight)
            received.release()
            ended = await _discard_body(request, settings.body_read_timeout)
            return _retry_later(
                message, admission.advice.refused(), as_json=as_json, close=not ended
            )
        decode_started = time.perf_counter()
        batch = await ingest.decoder.decode(
            DecodeRequest(
                body,
                request.headers.get("content-encoding"),
                as_json,
                request.headers.get(PROJECT_HEADER),
                settings.max_decompressed_bytes,
                settings.max_spans_per_request,
                logs=logs,
            )
        )
        writer.counters.decode_seconds.observe(time.perf_counter() - decode_started)
        if not logs:  # log records are no guide to how many spans a body holds
            admission.spans_per_byte.observe(len(body), len(batch.spans) + batch.rejected)
        # Waiting for the writer, the request holds its decoded spans (which the queue
        # limit counts), not its body as well.
        del body
    except TooManySpansError as exc:
        writer.counters.reject_request("too_many_spans")
        return _error(413, 8, str(exc), as_json=as_json)  # RESOURCE_EXHAUSTED
    except BodyTooLargeError as exc:
        writer.counters.reject_request("too_large")
        return _error(413, 8, str(exc), as_json=as_json)  # RESOURCE_EXHAUSTED
    except DecodeError as exc:
        writer.counters.reject_request("undecodable")
        signal = "log" if logs else "trace"
        return _error(400, 3, f"cannot decode OTLP {signal} request: {exc}", as_json=as_json)
    finally:
        received.release()
        admission.coming_spans -= expected
    return await _store(batch, writer, admission, settings, as_json=as_json)
