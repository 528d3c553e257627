"""Spans per run: how many spans of one run ingest takes before it refuses the rest.

A run that never ends (a loop in an agent, a bug in an exporter, or someone sending
millions of spans under one run id) would otherwise grow without limit, and everything
that reads a run whole — its page, its attribution, the online auditor — with it. Ingest
keeps a count per run and refuses a run's spans beyond `limit` as a partial success
(those spans are not retryable: the run is full). The counts live in this process, for
the runs seen most recently (`tracked` of them); the readers cap what they read at the
same limit, so a run that grew past it anyway (before a restart, through another
replica) still costs no more than `limit` spans to read.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from faultfinder.server.otlp.model import SpanRecord

RUN_TOO_LARGE = "run_too_large"
"""`IngestCounters.spans_rejected` reason of spans refused because their run is full."""

TRACKED_RUNS = 200_000
"""Runs whose span counts are remembered (least recently sent forgotten first): about
20 MB at most."""


@dataclass(frozen=True, slots=True)
class Admitted:
    """A submission's spans split into the ones ingest takes and a line per full run."""

    spans: Sequence[SpanRecord]
    refused: int = 0
    messages: tuple[str, ...] = ()


class RunSpanBudget:
    """Per-run span counts of this process; `admit` keeps each run within `limit`."""

    def __init__(
        self,
        limit: int,
        run_of: Callable[[SpanRecord], str],
        *,
        tracked: int = TRACKED_RUNS,
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        self.limit = limit
        self._run_of = run_of
        self._tracked = tracked
        self._counts: OrderedDict[str, int] = OrderedDict()

    def count(self, run_id: str) -> int:
        return self._counts.get(run_id, 0)

    def admit(self, spans: Sequence[SpanRecord]) -> Admitted:
        """Take the spans whose runs have room (in order, up to each run's room) and
        count them; the rest are refused."""
        kept: list[SpanRecord] = []
        refused: Counter[str] = Counter()
        room: dict[str, int] = {}
        for span in spans:
            run_id = self._run_of(span)
            left = room.get(run_id)
            if left is None:
                left = self.limit - self._counts.get(run_id, 0)
            if left > 0:
                kept.append(span)
                left -= 1
            else:
                refused[run_id] += 1
            room[run_id] = left
        for run_id, left in room.items():
            self._counts[run_id] = self.limit - left
            self._counts.move_to_end(run_id)
        while len(self._counts) > self._tracked:
            self._counts.popitem(last=False)
        if not refused:
            return Admitted(spans)
        messages = tuple(
            f"run {run_id!r} holds the most spans a run may have ({self.limit}); {n} more refused"
            for run_id, n in refused.most_common(3)
        )
        return Admitted(kept, sum(refused.values()), messages)

    def refund(self, spans: Sequence[SpanRecord]) -> None:
        """Give back the room of admitted spans that were not queued after all."""
        for run_id, n in Counter(self._run_of(span) for span in spans).items():
            if run_id in self._counts:
                self._counts[run_id] = max(0, self._counts[run_id] - n)
