"""In-process event bus: what changed in this sidecar (spans stored, run status, attributions,
human labels), fanned out to the dashboard's server-sent-event streams.

Events carry ids `<boot>:<n>`; a client that reconnects with the last id it saw gets
the events it missed from a bounded history, or a `reset` when they are gone (it then
reloads what it shows). Only this process's events are seen: attributions made by a
separate `faultfinder worker` process reach the dashboard when it next reloads.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from faultfinder.reading.model import SpanRecord
from faultfinder.server.ingest import WriteSpans

log = logging.getLogger(__name__)

SPANS_STORED = "spans"
"""New spans were stored: `{"runs": [run ids…], "spans": n}`."""
RUN_STATUS = "run.status"
"""A run changed status: `{"run_id", "previous", "status"}`."""
ATTRIBUTION = "attribution"
"""An attribution was stored: `{"run_id", "method", "status", "agent", "step"}`."""
RUN_CHANGED = "run.changed"
"""A write through the API touched a run (label, outcome, re-attribution request)."""
RESET = "reset"
"""Sent to a subscriber that missed events: reload everything."""
MAX_RUN_IDS = 100
"""Run ids listed in one `spans` event; a bigger batch is announced without them."""


@dataclass(frozen=True, slots=True)
class Event:
    id: str
    kind: str
    data: Mapping[str, Any]

    @property
    def run_ids(self) -> tuple[str, ...]:
        """The runs this event is about (empty when it is about none in particular)."""
        single = self.data.get("run_id")
        many = self.data.get("runs") or ()
        return (*([single] if isinstance(single, str) else []), *many)


@dataclass(eq=False)  # identity: subscriptions live in a set
class Subscription:
    """One listener's queue. `missed` is true when it asked to resume from an event the
    bus no longer holds (or from another process), or fell too far behind."""

    queue: asyncio.Queue[Event | None]
    missed: bool = False
    closed: bool = field(default=False)

    async def next(self, timeout: float) -> Event | None:
        """The next event, or None after `timeout` seconds or once the bus closed."""
        if self.closed:
            return None
        try:
            event = await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None
        if event is None:
            self.closed = True
        return event


class EventBus:
    """Publish events; subscribers each get every event published while they listen."""

    def __init__(self, *, history: int = 500, queue_size: int = 1000) -> None:
        self.boot = secrets.token_hex(4)
        self._numbers = itertools.count(1)
        self._history: deque[tuple[int, Event]] = deque(maxlen=history)
        self._queue_size = queue_size
        self._subscribers: set[Subscription] = set()
        self._closed = False

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def publish(self, kind: str, data: Mapping[str, Any]) -> Event:
        """Record an event and hand it to every subscriber (never blocks)."""
        number = next(self._numbers)
        event = Event(id=f"{self.boot}:{number}", kind=kind, data=dict(data))
        self._history.append((number, event))
        for subscription in list(self._subscribers):
            try:
                subscription.queue.put_nowait(event)
            except asyncio.QueueFull:
                # A listener this far behind cannot catch up event by event: end its
                # stream; it reconnects and reloads.
                log.warning("ending a dashboard event stream that fell behind")
                self._end(subscription, missed=True)
        return event

    def _replay_after(self, last_event_id: str | None) -> tuple[list[Event], bool]:
        """Events after `last_event_id` and whether some were missed."""
        if not last_event_id:
            return [], False
        boot, _, text = last_event_id.partition(":")
        if boot != self.boot or not text.isdigit():
            return [], True
        last = int(text)
        oldest = self._history[0][0] if self._history else last + 1
        missed = last + 1 < oldest
        return [event for number, event in self._history if number > last], missed

    @contextlib.asynccontextmanager
    async def subscribe(self, *, after: str | None = None) -> AsyncIterator[Subscription]:
        """Listen until the block exits; `after` resumes from a Last-Event-ID."""
        backlog, missed = self._replay_after(after)
        subscription = Subscription(asyncio.Queue(maxsize=self._queue_size), missed=missed)
        for event in backlog[-self._queue_size :]:
            subscription.queue.put_nowait(event)
        if self._closed:
            subscription.closed = True
        else:
            self._subscribers.add(subscription)
        try:
            yield subscription
        finally:
            self._subscribers.discard(subscription)

    def _end(self, subscription: Subscription, *, missed: bool) -> None:
        self._subscribers.discard(subscription)
        subscription.missed = subscription.missed or missed
        while not subscription.queue.empty():
            subscription.queue.get_nowait()
        subscription.queue.put_nowait(None)

    def close(self) -> None:
        """End every stream (shutdown)."""
        self._closed = True
        for subscription in list(self._subscribers):
            self._end(subscription, missed=False)


def announcing(write: WriteSpans, bus: EventBus) -> WriteSpans:
    """`write` (the span store's) that also publishes which runs got new spans."""

    async def write_and_announce(spans: Sequence[SpanRecord]) -> int:
        stored: int = await write(spans)
        if stored:
            # The run ids the decoder stamped on the spans.
            runs = list(dict.fromkeys(span.run_id for span in spans))
            listed = runs if len(runs) <= MAX_RUN_IDS else []
            bus.publish(SPANS_STORED, {"spans": stored, "runs": listed, "run_count": len(runs)})
        return stored

    return write_and_announce
