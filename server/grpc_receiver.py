"""OTLP/gRPC TraceService on its own port, sharing the ingest pipeline with OTLP/HTTP.

A full queue answers UNAVAILABLE (retryable per the OTLP spec) so exporters back off. The
service parses each request's bytes itself, so a message that is not an
`ExportTraceServiceRequest` gets INVALID_ARGUMENT (not retried), not gRPC's UNKNOWN and
a logged traceback.
"""

from __future__ import annotations

import logging
import time

import grpc
from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from faultfinder.conventions import PROJECT_HEADER
from faultfinder.server.auth import KeyRing, presented_key
from faultfinder.server.errors import TooManySpansError
from faultfinder.server.ingest import IngestSaturatedError, IngestUnavailableError, SpanWriter
from faultfinder.server.otlp.decode import DecodeError, decode_request

log = logging.getLogger(__name__)


SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


class _TraceService:
    def __init__(self, writer: SpanWriter, keys: KeyRing, max_spans: int | None) -> None:
        self._writer = writer
        self._keys = keys
        self._max_spans = max_spans

    async def Export(
        self,
        body: bytes,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        metadata = dict(context.invocation_metadata() or ())
        if self._keys.enabled:
            key = presented_key(
                _text(metadata.get("authorization")), _text(metadata.get("x-api-key"))
            )
            if not self._keys.may_ingest(key):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a valid API key is required")
        project = metadata.get(PROJECT_HEADER)
        decode_started = time.perf_counter()
        try:
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        except (ProtobufDecodeError, ValueError) as exc:
            self._writer.counters.reject_request("undecodable")
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"not an ExportTraceServiceRequest: {exc}"
            )
            raise AssertionError("unreachable") from exc
        try:
            batch = decode_request(
                request,
                project_header=project if isinstance(project, str) else None,
                max_spans=self._max_spans,
            )
        except TooManySpansError as exc:
            self._writer.counters.reject_request("too_many_spans")
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
            raise AssertionError("unreachable") from exc
        except DecodeError as exc:
            self._writer.counters.reject_request("undecodable")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise AssertionError("unreachable") from exc
        self._writer.counters.decode_seconds.observe(time.perf_counter() - decode_started)
        if batch.rejected:
            self._writer.counters.reject_spans("invalid_span", batch.rejected)
        self._writer.counters.values_truncated += batch.truncated_values
        try:
            stored = await self._writer.submit(batch.spans)
        except (IngestSaturatedError, IngestUnavailableError) as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            raise AssertionError("unreachable") from exc
        response = trace_service_pb2.ExportTraceServiceResponse()
        if batch.rejected or stored.rejected:
            response.partial_success.rejected_spans = batch.rejected + stored.rejected
            response.partial_success.error_message = "; ".join(
                filter(None, (batch.error_message, stored.error_message))
            )
        return response


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


class GrpcReceiver:
    """The gRPC server as a small daemon: `async with GrpcReceiver(...)`."""

    def __init__(
        self,
        writer: SpanWriter,
        keys: KeyRing,
        *,
        host: str,
        port: int,
        max_message_bytes: int,
        max_spans: int | None = None,
    ) -> None:
        self._writer = writer
        self._keys = keys
        self._max_spans = max_spans
        self._address = f"{host}:{port}"
        self._max_message_bytes = max_message_bytes
        self._server: grpc.aio.Server | None = None
        self.port: int | None = None

    async def __aenter__(self) -> GrpcReceiver:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", self._max_message_bytes),
                ("grpc.so_reuseport", 0),
            ]
        )
        service = _TraceService(self._writer, self._keys, self._max_spans)
        export = grpc.unary_unary_rpc_method_handler(
            service.Export,  # the request's bytes as they came (no deserializer)
            response_serializer=trace_service_pb2.ExportTraceServiceResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"Export": export}),)
        )
        self.port = server.add_insecure_port(self._address)
        if not self.port:
            raise OSError(f"cannot bind the OTLP/gRPC receiver to {self._address}")
        await server.start()
        self._server = server
        log.info("OTLP/gRPC receiver listening on %s", self._address)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._server is not None:
            await self._server.stop(grace=5)
