"""OTLP/HTTP trace receiver: `POST /v1/traces` in protobuf or JSON, gzip/deflate bodies.

Errors follow the OTLP/HTTP spec: 400 for undecodable bodies (not retryable), 415
for other content types, 413 over the size limits, 503 with Retry-After when the
ingest queue is full or the store is too slow (retryable).
"""

from __future__ import annotations

from google.rpc import status_pb2
from litestar import Controller, Request, Response, post
from litestar.datastructures import State

from faultfinder.sdk.conventions import PROJECT_HEADER
from faultfinder.server.ingest import IngestSaturatedError, IngestUnavailableError, SpanWriter
from faultfinder.server.otlp.decode import (
    BodyTooLargeError,
    DecodeError,
    decode_json,
    decode_protobuf,
    decompress,
    encode_response,
)
from faultfinder.server.settings import Settings

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


def _status_body(code: int, message: str, *, as_json: bool) -> bytes:
    """A google.rpc.Status, the error body OTLP/HTTP prescribes, in the request's encoding."""
    status = status_pb2.Status(code=code, message=message)
    if as_json:
        from google.protobuf import json_format

        return json_format.MessageToJson(status).encode()
    return status.SerializeToString()


def _error(
    http_status: int, grpc_code: int, message: str, *, as_json: bool, **headers: str
) -> Response[bytes]:
    return Response(
        _status_body(grpc_code, message, as_json=as_json),
        status_code=http_status,
        media_type=JSON if as_json else PROTOBUF,
        headers=headers or None,
    )


class OtlpTraceController(Controller):
    path = "/v1/traces"
    tags = ("otlp",)

    @post(
        operation_id="exportTraces",
        summary="OTLP/HTTP trace export (protobuf or JSON)",
        status_code=200,
        opt={"ingest": True},
    )
    async def export(self, request: Request[None, None, State]) -> Response[bytes]:
        settings: Settings = request.app.state.settings
        writer: SpanWriter = request.app.state.writer
        content_type = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
        if content_type not in (PROTOBUF, JSON):
            return Response(
                {
                    "detail": f"unsupported content type {content_type or '(none)'!r}; "
                    f"send {PROTOBUF} or {JSON}"
                },
                status_code=415,
            )
        as_json = content_type == JSON
        body = await request.body()
        if writer.queued_spans >= settings.ingest_queue_spans:
            # Refuse before decoding: under a retry storm, decoding bodies only to refuse
            # them would take the CPU the writer and the query API need.
            writer.counters.reject_request("saturated")
            message = f"ingest queue full ({writer.queued_spans} spans waiting)"
            retry = str(settings.retry_after)
            return _error(503, 14, message, as_json=as_json, **{"Retry-After": retry})
        try:
            raw = decompress(
                body,
                request.headers.get("content-encoding"),
                max_size=settings.max_decompressed_bytes,
            )
            project = request.headers.get(PROJECT_HEADER)
            decode = decode_json if as_json else decode_protobuf
            batch = decode(raw, project_header=project)
        except BodyTooLargeError as exc:
            writer.counters.reject_request("too_large")
            return _error(413, 8, str(exc), as_json=as_json)  # RESOURCE_EXHAUSTED
        except DecodeError as exc:
            writer.counters.reject_request("undecodable")
            return _error(400, 3, f"cannot decode OTLP trace request: {exc}", as_json=as_json)
        if batch.rejected:
            writer.counters.reject_spans("invalid_span", batch.rejected)
        try:
            await writer.submit(batch.spans)
        except (IngestSaturatedError, IngestUnavailableError) as exc:
            retry = str(settings.retry_after)
            return _error(503, 14, str(exc), as_json=as_json, **{"Retry-After": retry})
        return Response(
            encode_response(batch.rejected, batch.error_message, as_json=as_json),
            status_code=200,
            media_type=JSON if as_json else PROTOBUF,
        )
