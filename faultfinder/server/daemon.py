"""The one shape of every background loop in the sidecar.

A `Daemon` runs one or more loops as tasks of the event loop it was entered on:
`async with daemon:` starts them (`start`), leaving the block stops them (`stop`). A
daemon whose loops must finish their work before the process exits (the span writer
drains its queue) sets `drain_on_stop`; the others are cancelled. A `PeriodicDaemon`
calls `tick` every `interval` seconds and logs a failed tick instead of dying, so a
database that is briefly down costs one round, not the loop.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any, Self

__all__ = ["Daemon", "PeriodicDaemon"]

from faultfinder.server.db.failures import log_round_failure

log = logging.getLogger(__name__)


class Daemon(abc.ABC):
    """Background loops with a start, a stop, and `async with` around both."""

    name = "faultfinder-daemon"
    """The tasks' name (shown by asyncio's debug output and in task dumps)."""
    drain_on_stop = False
    """Stop by asking the loops to end and waiting for them, instead of cancelling."""

    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        """The coroutines to run as tasks; one `run` by default."""
        return [self.run()]

    @abc.abstractmethod
    async def run(self) -> None:
        """The loop; it returns once `stopping` is set (or is cancelled)."""

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def running(self) -> bool:
        return any(not task.done() for task in self._tasks)

    async def pause(self, seconds: float) -> bool:
        """Wait `seconds`, or less if the daemon is asked to stop; returns whether it is."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return self.stopping

    def stop_requested(self) -> None:  # noqa: B027 - an optional hook
        """Called once when `stop` begins (e.g. to wake a loop waiting for work)."""

    async def start(self) -> None:
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        self._stopping.clear()
        loops = self.loops()
        self._tasks = [
            asyncio.create_task(loop, name=self.name if len(loops) == 1 else f"{self.name}-{i}")
            for i, loop in enumerate(loops)
        ]

    async def stop(self) -> None:
        self._stopping.set()
        self.stop_requested()
        if not self.drain_on_stop:
            for task in self._tasks:
                task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


class PeriodicDaemon(Daemon):
    """A daemon that calls `tick` every `interval` seconds until it is stopped."""

    def __init__(self, interval: float) -> None:
        super().__init__()
        self.interval = interval

    @abc.abstractmethod
    async def tick(self) -> None:
        """One round of the daemon's work."""

    async def run(self) -> None:
        while not self.stopping:
            try:
                await self.tick()
            except Exception as error:
                log_round_failure(log, f"{self.name}: a round", error)
            await self.pause(self.interval)
