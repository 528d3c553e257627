"""The one OTLP export pipeline both receivers call: refuse → read → decode → count → store.

OTLP/HTTP (`faultfinder/server/api/otlp.py`) and OTLP/gRPC (`faultfinder/server/grpc_receiver.py`)
each take a request off their wire, hand its body here as a `Body`, and turn what comes
back into their answer: `Receiver.export` returns what was stored (`Stored`: the spans
rejected, and why) or raises one of the server's errors (`faultfinder/server/errors.py`),
which both transports answer from the same table (`answer_for`): `Refused` (503 /
UNAVAILABLE, with the wait to advise), `BodyTimeoutError` (408 / DEADLINE_EXCEEDED),
`DecodeError` (400 / INVALID_ARGUMENT), `BodyTooLargeError` and `TooManySpansError`
(413 / RESOURCE_EXHAUSTED). The same body therefore gets the same answer, with the same
message, whichever way it came.

Each refusal is counted in the writer's counters under its reason (`saturated`,
`inflight`, `body_timeout`, `body_stalled`, `too_large`, `too_many_spans`, `undecodable`), and each
decoding's time in `decode_seconds`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from faultfinder.server.admission import IngestAdmission, SpansPerByte
from faultfinder.server.errors import (
    BodyStalled,
    BodyTimeoutError,
    BodyTooLargeError,
    DecodeError,
    InflightFull,
    Refused,
    TooManySpansError,
)
from faultfinder.server.ingest import SpanWriter, Stored
from faultfinder.server.otlp.decode import DecodedBatch
from faultfinder.server.otlp.pool import BodyDecoder, DecodeRequest
from faultfinder.server.settings import Settings

__all__ = ["Body", "Export", "Receiver", "WholeBody"]


class Body(Protocol):
    """A request's body as its transport receives it."""

    @property
    def declared(self) -> int:
        """Bytes the sender says are coming (0: not said), known before `read`."""
        ...

    @property
    def counted(self) -> bool:
        """Whether its bytes count against the in-flight byte limit as they arrive
        (OTLP/HTTP streams them; gRPC hands over whole messages)."""
        ...

    async def read(self) -> bytes:
        """The whole body: `TimeoutError` when it is too slow, `InflightFull` when its
        next bytes would pass the in-flight limit."""
        ...

    def release(self) -> None:
        """Give back what the body holds of the in-flight limit."""
        ...


@dataclass(slots=True)
class WholeBody:
    """A body that arrived whole (a gRPC message): nothing to wait for, nothing counted."""

    body: bytes

    @property
    def declared(self) -> int:
        return len(self.body)

    @property
    def counted(self) -> bool:
        return False

    async def read(self) -> bytes:
        return self.body

    def release(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class Export:
    """One export request: which signal, how its body is encoded, for which project."""

    logs: bool
    """An `ExportLogsServiceRequest` (GenAI events as log records), else trace spans."""
    as_json: bool = False
    content_encoding: str | None = None
    project_header: str | None = None


class Receiver:
    """The export pipeline of one transport: `export(request, body)`.

    Both transports share the writer, the admission (the in-flight bytes, the spans on
    their way, the wait to advise) and the decoder; each learns its own spans per byte
    (`spans_per_byte`), as OTLP/HTTP bodies may come compressed and gRPC's arrive inflated.
    """

    def __init__(
        self,
        writer: SpanWriter,
        admission: IngestAdmission,
        decoder: BodyDecoder,
        settings: Settings,
        *,
        spans_per_byte: SpansPerByte,
    ) -> None:
        self.writer = writer
        self.admission = admission
        self._decoder = decoder
        self._settings = settings
        self._spans_per_byte = spans_per_byte

    async def export(self, request: Export, body: Body) -> Stored:
        """Admit, read, decode and store one request; what was stored, or the error that
        answers it (counted under its reason)."""
        admission = self.admission
        # Log records are no guide to how many spans a body holds: they teach the
        # estimate nothing and count as one span.
        expected = 1 if request.logs else self._spans_per_byte.estimate(body.declared)
        # Refuse before buffering or decoding: under a retry storm, bodies held only to
        # be refused would take the memory, and decoding them the CPU, that the writer
        # and the query API need.
        self._refuse_early(body, expected)
        # A streamed body reserves its spans as its bytes arrive (`ArrivingBody`), never
        # by its declared length: one idle sender declaring 16 MiB would otherwise fill
        # the queue limit and have every other export refused.
        reserved = 0 if body.counted else expected
        admission.coming_spans += reserved
        try:
            data = await self._read(body)
            batch = await self._decode(request, data)
            if not request.logs:
                self._spans_per_byte.observe(len(data), len(batch.spans) + batch.rejected)
            # Waiting for the writer, the request holds its decoded spans (which the
            # queue limit counts), not its body as well.
            del data
        finally:
            body.release()
            admission.coming_spans -= reserved
        return await admission.store(
            self.writer, batch, unavailable_wait=self._settings.retry_after
        )

    def _refuse_early(self, body: Body, expected: int) -> None:
        """`Refused` when the request must be turned away before its body is read: the
        queue (counting the requests let in and still being read or decoded) has no room
        for it, or its declared length would pass the in-flight byte limit."""
        admission = self.admission
        message = admission.queue_refusal(
            self.writer.queued_spans, expected, self._settings.ingest_queue_spans
        )
        if message:
            self.writer.counters.reject_request("saturated")
            raise Refused(message, admission.advice.refused())
        if body.counted and admission.bytes.would_pass(body.declared):
            self.writer.counters.reject_request("inflight")
            raise Refused(self._busy(), admission.advice.refused())

    def _busy(self) -> str:
        inflight = self.admission.bytes
        return f"ingest busy ({inflight.held} request bytes being received, limit {inflight.limit})"

    async def _read(self, body: Body) -> bytes:
        try:
            return await body.read()
        except BodyStalled:
            self.writer.counters.reject_request("body_stalled")
            raise BodyTimeoutError(
                f"no byte of the body arrived for {self._settings.body_progress_timeout:g} s"
            ) from None
        except TimeoutError:
            self.writer.counters.reject_request("body_timeout")
            raise BodyTimeoutError(
                f"the body did not arrive within {self._settings.body_read_timeout:g} s"
            ) from None
        except InflightFull:
            self.writer.counters.reject_request("inflight")
            raise Refused(self._busy(), self.admission.advice.refused()) from None

    async def _decode(self, request: Export, data: bytes) -> DecodedBatch:
        settings, counters = self._settings, self.writer.counters
        started = time.perf_counter()
        try:
            batch = await self._decoder.decode(
                DecodeRequest(
                    data,
                    request.content_encoding,
                    request.as_json,
                    request.project_header,
                    settings.max_decompressed_bytes,
                    settings.max_spans_per_request,
                    logs=request.logs,
                    group_by_conversation=settings.group_by_conversation,
                )
            )
        except TooManySpansError:
            counters.reject_request("too_many_spans")
            raise
        except BodyTooLargeError:
            counters.reject_request("too_large")
            raise
        except DecodeError as exc:
            counters.reject_request("undecodable")
            signal = "log" if request.logs else "trace"
            raise DecodeError(f"cannot decode OTLP {signal} request: {exc}") from exc
        counters.decode_seconds.observe(time.perf_counter() - started)
        return batch
