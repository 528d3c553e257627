"""Spans per run: how many spans of one run ingest takes before it refuses the rest.

A run that never ends (a loop in an agent, a bug in an exporter, or someone sending
millions of spans under one run id) would otherwise grow without limit, and everything
that reads a run whole — its page, its attribution, the online auditor — with it. Ingest
keeps a count per run and refuses a run's spans beyond `limit` as a partial success
(those spans are not retryable: the run is full). The counts live in this process, for
the runs seen most recently (`tracked` of them); the readers cap what they read at the
same limit, so a run that grew past it anyway (before a restart, through another
replica) still costs no more than `limit` spans to read. A run is bounded in bytes too:
once its spans hold `max_bytes`, its further spans are stored with their text values cut
(`run_bytes.py`).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from faultfinder.conventions import RUN_OUTCOME
from faultfinder.reading.model import SpanRecord, StatusCode
from faultfinder.server.run_bytes import MAX_RUN_BYTES, shrunk, span_bytes

RUN_TOO_LARGE = "run_too_large"
"""`IngestCounters.spans_rejected` reason of spans refused because their run is full."""

TRACKED_RUNS = 200_000
"""Runs whose span counts are remembered (least recently sent forgotten first): about
20 MB at most."""


ENDING_ALLOWANCE = 100
"""Spans a full run still takes when they say it failed (its root ended with an error —
SDKs send the root last — or a span carrying `faultfinder.run.outcome`): a failed run
whose other spans filled it still ends failed, and is attributed on what was stored."""


def _says_how_run_ended(span: SpanRecord) -> bool:
    root = span.parent_span_id is None or span.parent_remote is True
    return (root and span.status_code == StatusCode.ERROR) or RUN_OUTCOME in span.attributes


@dataclass(frozen=True, slots=True)
class Admitted:
    """A submission's spans split into the ones ingest takes and a line per full run."""

    spans: Sequence[SpanRecord]
    refused: int = 0
    messages: tuple[str, ...] = ()


class RunSpanBudget:
    """Per-run span counts of this process; `admit` keeps each run within `limit`."""

    def __init__(
        self, limit: int, *, tracked: int = TRACKED_RUNS, max_bytes: int = MAX_RUN_BYTES
    ) -> None:
        """`max_bytes`: bytes of values a run's spans keep whole; its later spans are
        stored `shrunk` (`run_bytes.py`)."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        self.limit = limit
        self.max_bytes = max_bytes
        self._tracked = tracked
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._bytes: dict[str, int] = {}
        self.shrunk = 0
        """Spans stored shrunk because their run was over `max_bytes`."""

    def count(self, run_id: str) -> int:
        return self._counts.get(run_id, 0)

    def admit(self, spans: Sequence[SpanRecord]) -> Admitted:
        """Take the spans whose runs have room (in order, up to each run's room) and
        count them; the rest are refused."""
        kept: list[SpanRecord] = []
        refused: Counter[str] = Counter()
        room: dict[str, int] = {}
        for span in spans:
            run_id = span.run_id  # stamped by the decoder
            left = room.get(run_id)
            if left is None:
                left = self.limit - self._counts.get(run_id, 0)
            if left > 0 or (left > -ENDING_ALLOWANCE and _says_how_run_ended(span)):
                kept.append(self._within_bytes(span))
                left -= 1
            else:
                refused[run_id] += 1
            room[run_id] = left
        for run_id, left in room.items():
            self._counts[run_id] = self.limit - left
            self._counts.move_to_end(run_id)
        while len(self._counts) > self._tracked:
            forgotten, _ = self._counts.popitem(last=False)
            self._bytes.pop(forgotten, None)
        if not refused:
            return Admitted(kept)  # some may be shrunk
        messages = tuple(
            f"run {run_id!r} holds the most spans a run may have ({self.limit}); {n} more refused"
            for run_id, n in refused.most_common(3)
        )
        return Admitted(kept, sum(refused.values()), messages)

    def _within_bytes(self, span: SpanRecord) -> SpanRecord:
        """`span`, or `shrunk(span)` once its run holds `max_bytes`; counted."""
        held = self._bytes.get(span.run_id, 0)
        if held >= self.max_bytes:
            span = shrunk(span)
            self.shrunk += 1
        self._bytes[span.run_id] = held + span_bytes(span)
        return span

    def refund(self, spans: Sequence[SpanRecord]) -> None:
        """Give back the room of admitted spans that were not queued after all."""
        for run_id, n in Counter(span.run_id for span in spans).items():
            if run_id in self._counts:
                self._counts[run_id] = max(0, self._counts[run_id] - n)
