"""OTLP/gRPC TraceService on its own port, sharing the receiver pipeline with OTLP/HTTP
(`faultfinder/server/receiver.py`, answered from `faultfinder/server/errors.py`'s table);
LogsService beside it for the GenAI events instrumentations send as log records
(`faultfinder/server/otlp/log_events.py`).

A full queue answers UNAVAILABLE (retryable per the OTLP spec) with a RetryInfo giving
the same wait the OTLP/HTTP receiver would give in Retry-After (`faultfinder/server/admission.py`,
one admission for both receivers): as `grpc-status-details-bin`, where the Collector's
exporters look for it, and as `google.rpc.retryinfo-bin`, where the OpenTelemetry Python
exporter does. A request that would find the queue full is refused before it is parsed.
The pipeline parses each request's bytes itself, so a message that is not an
`ExportTraceServiceRequest` gets INVALID_ARGUMENT (not retried), not gRPC's UNKNOWN and
a logged traceback.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import NoReturn

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from faultfinder.conventions import PROJECT_HEADER
from faultfinder.server.auth import KeyRing, presented_key
from faultfinder.server.errors import Refused, ServerError, answer_for
from faultfinder.server.ingest import Stored
from faultfinder.server.receiver import Export, Receiver, WholeBody
from faultfinder.server.settings import Settings

log = logging.getLogger(__name__)


SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"

_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}
"""`grpc.StatusCode` by its number (the `google.rpc.Code` numbers `errors.ANSWERS` gives)."""


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
    def __init__(self, receiver: Receiver, keys: KeyRing) -> None:
        self._receiver = receiver
        self._keys = keys

    async def Export(
        self,
        body: bytes,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        stored = await self._take(body, context, logs=False)
        del body  # a refusal below must not keep the request alive through its traceback
        if isinstance(stored, _Refusal):
            await stored.abort(context)
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
        stored = await self._take(body, context, logs=True)
        del body
        if isinstance(stored, _Refusal):
            await stored.abort(context)
        return logs_service_pb2.ExportLogsServiceResponse()

    async def _take(
        self,
        body: bytes,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
        *,
        logs: bool,
    ) -> Stored | _Refusal:
        """Check the key, then the receiver pipeline; its error as the `_Refusal` to
        answer with, which the caller sends once it no longer holds the request's bytes."""
        metadata = dict(context.invocation_metadata() or ())
        if self._keys.enabled:
            key = presented_key(
                _text(metadata.get("authorization")), _text(metadata.get("x-api-key"))
            )
            if not self._keys.may_ingest(key):
                return _Refusal(grpc.StatusCode.UNAUTHENTICATED, "a valid API key is required")
        export = Export(logs=logs, project_header=_text(metadata.get(PROJECT_HEADER)))
        try:
            return await self._receiver.export(export, WholeBody(body))
        except ServerError as exc:
            # Answered outside this block: `context.abort` raises, and raised here its
            # exception would chain this one, whose traceback holds the pipeline's frames
            # and, through them, the request (tens of MiB) for as long as gRPC keeps it.
            trailers = retry_trailers(str(exc), exc.seconds) if isinstance(exc, Refused) else ()
            refusal = _Refusal(_STATUS_CODES[answer_for(exc).grpc_code], str(exc), trailers)
        return refusal


@dataclass(frozen=True, slots=True)
class _Refusal:
    """How a call is refused: its status, message and trailing metadata."""

    code: grpc.StatusCode
    message: str
    trailers: tuple[tuple[str, bytes], ...] = ()

    async def abort(self, context: grpc.aio.ServicerContext) -> NoReturn:  # type: ignore[type-arg]
        await context.abort(self.code, self.message, trailing_metadata=self.trailers)
        raise AssertionError("unreachable: abort raises")


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


class GrpcReceiver:
    """The gRPC server as a small daemon: `async with GrpcReceiver(...)`."""

    def __init__(self, receiver: Receiver, keys: KeyRing, settings: Settings) -> None:
        self._service = _TraceService(receiver, keys)
        self._address = f"{settings.host}:{settings.grpc_port}"
        # The most an OTLP/HTTP body may be on the wire: gRPC core buffers a whole message
        # before the pipeline sees it, so a larger one is refused there, unread.
        self._max_message_bytes = settings.max_request_bytes
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
