"""OTLP/gRPC TraceService on its own port, sharing the ingest pipeline with OTLP/HTTP;
LogsService beside it for the GenAI events instrumentations send as log records
(`faultfinder/server/otlp/log_events.py`).

A full queue answers UNAVAILABLE (retryable per the OTLP spec) with a RetryInfo giving
the same wait the OTLP/HTTP receiver would give in Retry-After (`faultfinder/server/admission.py`,
one admission for both receivers): as `grpc-status-details-bin`, where the Collector's
exporters look for it, and as `google.rpc.retryinfo-bin`, where the OpenTelemetry Python
exporter does. A request that would find the queue full is refused before it is parsed.
The service parses each request's bytes itself, so a message that is not an
`ExportTraceServiceRequest` gets INVALID_ARGUMENT (not retried), not gRPC's UNKNOWN and
a logged traceback.
"""

from __future__ import annotations

import logging
import time

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from faultfinder.conventions import PROJECT_HEADER
from faultfinder.server.admission import IngestAdmission, Refused, SpansPerByte
from faultfinder.server.auth import KeyRing, presented_key
from faultfinder.server.errors import TooManySpansError
from faultfinder.server.ingest import SpanWriter, Stored
from faultfinder.server.otlp.decode import DecodedBatch, DecodeError, decode_request
from faultfinder.server.otlp.log_events import decode_logs_protobuf
from faultfinder.server.settings import Settings

log = logging.getLogger(__name__)


SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"


def retry_trailers(message: str, seconds: int) -> tuple[tuple[str, bytes], ...]:
    """Trailing metadata that tells a refused exporter to come back after `seconds`."""
    retry_info = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds))
    detail = any_pb2.Any()
    detail.Pack(retry_info)
    status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message=message, details=[detail])
    return (
        ("grpc-status-details-bin", status.SerializeToString()),
        ("google.rpc.retryinfo-bin", retry_info.SerializeToString()),
    )


class _TraceService:
    def __init__(
        self,
        writer: SpanWriter,
        keys: KeyRing,
        admission: IngestAdmission,
        *,
        max_spans: int | None,
        queue_limit: int,
        retry_after: int,
    ) -> None:
        self._writer = writer
        self._keys = keys
        self._admission = admission
        self._max_spans = max_spans
        self._queue_limit = queue_limit
        self._retry_after = retry_after
        self._spans_per_byte = SpansPerByte(initial=1 / 1000)
        """Learned apart from OTLP/HTTP's: gRPC hands over bodies already inflated."""

    async def _retry_later(
        self,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
        message: str,
        seconds: int,
    ) -> None:
        await context.abort(
            grpc.StatusCode.UNAVAILABLE, message, trailing_metadata=retry_trailers(message, seconds)
        )

    async def Export(
        self,
        body: bytes,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        stored = await self._take(body, context, logs=False)
        response = trace_service_pb2.ExportTraceServiceResponse()
        if stored.rejected:
            response.partial_success.rejected_spans = stored.rejected
            response.partial_success.error_message = stored.error_message
        return response

    async def ExportLogs(
        self,
        body: bytes,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> logs_service_pb2.ExportLogsServiceResponse:
        """LogsService's Export: the GenAI events among the records, taken like spans."""
        await self._take(body, context, logs=True)
        return logs_service_pb2.ExportLogsServiceResponse()

    async def _take(
        self,
        body: bytes,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
        *,
        logs: bool,
    ) -> Stored:
        """Check the key, admit, decode and store one request's body; what was stored."""
        metadata = dict(context.invocation_metadata() or ())
        if self._keys.enabled:
            key = presented_key(
                _text(metadata.get("authorization")), _text(metadata.get("x-api-key"))
            )
            if not self._keys.may_ingest(key):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a valid API key is required")
        project = metadata.get(PROJECT_HEADER)
        admission = self._admission
        # Log records are no guide to how many spans a body holds: they teach the
        # estimate nothing and count as one span.
        expected = 1 if logs else self._spans_per_byte.estimate(len(body))
        message = admission.queue_refusal(self._writer.queued_spans, expected, self._queue_limit)
        if message:
            self._writer.counters.reject_request("saturated")
            await self._retry_later(context, message, admission.advice.refused())
        admission.coming_spans += expected
        try:
            batch = await self._decode(body, project, context, logs=logs)
        finally:
            admission.coming_spans -= expected
        if not logs:
            self._spans_per_byte.observe(len(body), len(batch.spans) + batch.rejected)
        try:
            return await admission.store(self._writer, batch, unavailable_wait=self._retry_after)
        except Refused as refused:
            await self._retry_later(context, str(refused), refused.seconds)
            raise AssertionError("unreachable") from refused

    async def _decode(
        self,
        body: bytes,
        project: object,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
        *,
        logs: bool,
    ) -> DecodedBatch:
        decode_started = time.perf_counter()
        request = None  # a log request parses its bytes itself (a DecodeError below)
        if not logs:
            try:
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            except (ProtobufDecodeError, ValueError) as exc:
                self._writer.counters.reject_request("undecodable")
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, f"not an ExportTraceServiceRequest: {exc}"
                )
                raise AssertionError("unreachable") from exc
        header = project if isinstance(project, str) else None
        try:
            batch = (
                decode_logs_protobuf(body, project_header=header, max_records=self._max_spans)
                if request is None
                else decode_request(request, project_header=header, max_spans=self._max_spans)
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
        return batch


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


class GrpcReceiver:
    """The gRPC server as a small daemon: `async with GrpcReceiver(...)`."""

    def __init__(
        self, writer: SpanWriter, keys: KeyRing, admission: IngestAdmission, settings: Settings
    ) -> None:
        self._service = _TraceService(
            writer,
            keys,
            admission,
            max_spans=settings.max_spans_per_request,
            queue_limit=settings.ingest_queue_spans,
            retry_after=settings.retry_after,
        )
        self._address = f"{settings.host}:{settings.grpc_port}"
        self._max_message_bytes = settings.max_decompressed_bytes
        self._server: grpc.aio.Server | None = None
        self.port: int | None = None

    async def __aenter__(self) -> GrpcReceiver:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", self._max_message_bytes),
                ("grpc.so_reuseport", 0),
            ]
        )
        export = grpc.unary_unary_rpc_method_handler(
            self._service.Export,  # the request's bytes as they came (no deserializer)
            response_serializer=trace_service_pb2.ExportTraceServiceResponse.SerializeToString,
        )
        export_logs = grpc.unary_unary_rpc_method_handler(
            self._service.ExportLogs,
            response_serializer=logs_service_pb2.ExportLogsServiceResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(SERVICE, {"Export": export}),
                grpc.method_handlers_generic_handler(LOGS_SERVICE, {"Export": export_logs}),
            )
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
