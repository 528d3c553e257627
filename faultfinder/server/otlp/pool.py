"""Decoding OTLP bodies in worker processes, so that ingest uses more than one core.

One Python process decodes, maps and stores every span on one core (the GIL): with
`serve --processes N` the sidecar keeps its one event loop and its one span writer, and
decoder processes decompress and decode the request bodies (the processes the online
auditor does not take: `faultfinder/server/audit_process.py`). A body crosses to a
decoder as bytes; its spans come back as plain tuples (cheaper to unpickle than the
frozen dataclasses) and are rebuilt here, so the serving process spends about a fifth
of the decoding's CPU on each span (`reports/ingest.md`).

Small uncompressed bodies are decoded in place: below `POOL_MIN_BYTES` the round trip
costs more than it saves. Without decoder processes (`--processes 1`) the others are
decoded in a thread, never on the event loop. A decoder that dies (killed, out of
memory) breaks the pool; the request it was decoding is decoded in place and the pool
is started again, so a lost process never loses a request or stops ingest.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import multiprocessing
import signal
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from faultfinder.reading.model import SpanEvent, SpanRecord, StatusCode
from faultfinder.server.memory import return_large_buffers
from faultfinder.server.otlp.decode import (
    DecodedBatch,
    decode_json,
    decode_protobuf,
    decompress,
)
from faultfinder.server.otlp.log_events import decode_logs_json, decode_logs_protobuf

__all__ = ["POOL_MIN_BYTES", "BodyDecoder", "DecodeRequest", "decode_body"]

log = logging.getLogger(__name__)

POOL_MIN_BYTES = 16 * 1024
"""Uncompressed bodies smaller than this are decoded on the event loop (a few spans:
sending them to a decoder, or a thread, and back costs more than decoding them). A
compressed body never is: a few hundred bytes may inflate to the decompressed limit."""

_PLAIN = (None, "", "identity")
"""Content-Encodings of a body that is what it says it is."""

_IN_PLACE_DECODERS = 2
"""Threads decoding the larger bodies when there are no decoder processes: off the event
loop, and no more at once than the memory of a few largest requests allows."""


@dataclass(frozen=True, slots=True)
class DecodeRequest:
    """One OTLP/HTTP body and what decoding it needs."""

    body: bytes
    content_encoding: str | None
    as_json: bool
    project_header: str | None
    max_decompressed_bytes: int
    max_spans: int | None
    logs: bool = False
    """An `ExportLogsServiceRequest` (`/v1/logs`): its GenAI events become carrier spans
    (`log_events.py`); `max_spans` caps its log records."""
    group_by_conversation: bool = False
    """The setting of that name: which run each decoded span is stamped with."""


def decode_body(request: DecodeRequest) -> DecodedBatch:
    """Decompress and decode `request` (raises the decoder's `RequestError`s)."""
    raw = decompress(
        request.body, request.content_encoding, max_size=request.max_decompressed_bytes
    )
    if request.logs:
        decode_logs = decode_logs_json if request.as_json else decode_logs_protobuf
        return decode_logs(
            raw, project_header=request.project_header, max_records=request.max_spans
        )
    decode = decode_json if request.as_json else decode_protobuf
    return decode(
        raw,
        project_header=request.project_header,
        max_spans=request.max_spans,
        group_by_conversation=request.group_by_conversation,
    )


_Wire = tuple[list[tuple[Any, ...]], int, str, dict[str, int], int]


_FIELDS = tuple(field.name for field in dataclasses.fields(SpanRecord))
"""`SpanRecord`'s fields, in the order its tuples carry them."""


def _decode_to_wire(request: DecodeRequest) -> _Wire:
    """In a decoder process: `decode_body`, with the spans as tuples (the status as a
    number, the events as tuples)."""
    batch = decode_body(request)
    spans = []
    for span in batch.spans:
        values = {name: getattr(span, name) for name in _FIELDS}
        values["status_code"] = int(span.status_code)
        values["events"] = [
            (event.name, event.time_unix_nano, event.attributes) for event in span.events
        ]
        spans.append(tuple(values.values()))
    return spans, batch.rejected, batch.error_message, batch.reasons, batch.truncated_values


def _from_wire(wire: _Wire) -> DecodedBatch:
    spans, rejected, error_message, reasons, truncated = wire
    return DecodedBatch(
        spans=[_span_from_wire(fields) for fields in spans],
        rejected=rejected,
        error_message=error_message,
        reasons=reasons,
        truncated_values=truncated,
    )


def _span_from_wire(fields: tuple[Any, ...]) -> SpanRecord:
    values = dict(zip(_FIELDS, fields, strict=True))
    values["status_code"] = StatusCode(values["status_code"])
    values["events"] = tuple(SpanEvent(*event) for event in values["events"])
    return SpanRecord(**values)


def _quiet_worker() -> None:
    # Ctrl-C reaches the whole process group; the serving process decides when its
    # decoders stop (at shutdown), not the terminal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return_large_buffers()  # each decoder holds request bodies too


def _ready() -> bool:
    return True


class BodyDecoder:
    """Decodes OTLP bodies in place (no `decoders`) or in that many decoder processes
    (bodies of at least `POOL_MIN_BYTES`)."""

    def __init__(self, decoders: int = 0) -> None:
        if decoders < 0:
            raise ValueError(f"decoders must be at least 0, got {decoders}")
        self.decoders = decoders
        self._pool: ProcessPoolExecutor | None = None
        self.restarts = 0
        """Times a broken pool (a decoder died) was replaced."""
        self._threads = ThreadPoolExecutor(_IN_PLACE_DECODERS, thread_name_prefix="otlp-decode")

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self.decoders,
            # A fresh interpreter that imports only the decoder: forking the server would
            # copy its threads' locks (the database driver's) in whatever state they are.
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_quiet_worker,
        )

    def pids(self) -> list[int]:
        """The decoder processes' ids (empty when decoding in place)."""
        pool = self._pool
        # The pool's own table of its processes: it has no public accessor.
        processes = getattr(pool, "_processes", None) or {}
        return sorted(processes)

    async def start(self) -> None:
        """Start the decoder processes and wait until each has imported the decoder, so
        that the first requests do not pay for it."""
        if not self.decoders:
            return
        self._pool = self._new_pool()
        loop = asyncio.get_running_loop()
        await asyncio.gather(
            *(loop.run_in_executor(self._pool, _ready) for _ in range(self.decoders))
        )

    async def aclose(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)

    async def decode(self, request: DecodeRequest) -> DecodedBatch:
        """`decode_body(request)`, in a decoder process when there are any and the body
        is large enough to be worth it."""
        pool = self._pool
        if len(request.body) < POOL_MIN_BYTES and request.content_encoding in _PLAIN:
            return decode_body(request)
        if pool is None:
            # Off the event loop, so that /healthz and the other exports are answered
            # meanwhile; at most `_IN_PLACE_DECODERS` at once.
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._threads, decode_body, request)
        loop = asyncio.get_running_loop()
        try:
            wire = await loop.run_in_executor(pool, _decode_to_wire, request)
        except BrokenProcessPool:
            self._replace(pool)
            return decode_body(request)
        return _from_wire(wire)

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        if self._pool is not broken:
            return  # another request already replaced it
        log.error("an OTLP decoder process died; starting the decoders again")
        broken.shutdown(wait=False, cancel_futures=True)
        self._pool = self._new_pool()
        self.restarts += 1
