"""The online auditor in a process of its own (`serve --processes 2` and more).

In the serving process the auditor's scoring shares one core with ingest (the GIL):
under a flood of new runs it takes its `busy_share` of that core, and ingest the rest.
Here it runs in a spawned process with its own database connections: it reads the
running runs, scores them and stores its alarms itself, and sends each alarm it stored
back over a pipe, where the serving process announces it (webhooks, metrics, the
dashboard's live updates) as if it had raised it. A process that dies is started again
after `RESTART_DELAY` seconds, twice as long each time it died soon after starting (at most
`MAX_RESTART_DELAY`); alarms are idempotent per run, so one raised twice is
stored and announced once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from faultfinder.attributors.auditor import Alarm
from faultfinder.server.audit import OnAlarm
from faultfinder.server.daemon import Daemon
from faultfinder.server.settings import Settings

__all__ = [
    "MAX_RESTART_DELAY",
    "NICENESS",
    "RESTART_DELAY",
    "STABLE_AFTER",
    "AuditorProcess",
    "RestartBackoff",
]

log = logging.getLogger(__name__)

RESTART_DELAY = 1.0
"""Seconds before an auditor process that died is started again, the first time."""

MAX_RESTART_DELAY = 60.0
"""The longest wait before starting it again: the delay doubles each time a process dies
within `STABLE_AFTER` seconds of its start (a database it cannot open, say, kills every
one at once: without a backoff it was started again 78 times in 40 s)."""

STABLE_AFTER = 60.0
"""Seconds a process must have run for its death to reset the delay to `RESTART_DELAY`."""


class RestartBackoff:
    """How long to wait before starting a process that died, given how long it ran."""

    def __init__(self) -> None:
        self.delay = RESTART_DELAY

    def after(self, ran_for: float) -> float:
        """The wait before the next start; a process that died young doubles the next."""
        if ran_for >= STABLE_AFTER:
            self.delay = RESTART_DELAY
        wait = self.delay
        self.delay = min(MAX_RESTART_DELAY, self.delay * 2)
        return wait


NICENESS = 10
"""How much lower the auditor process's scheduling priority is than the serving
process's: its alarms are background work, and when the cores are busy the ingest,
queries and attributions of the serving process go first (the auditor catches up when
the load falls)."""

_STOP = "stop"


class AuditorProcess(Daemon):
    """Daemon: runs `OnlineAuditor` in a child process and announces its alarms here."""

    name = "faultfinder-auditor-process"

    def __init__(self, settings: Settings, *, on_alarm: OnAlarm | None = None) -> None:
        super().__init__()
        self._settings = settings
        self._on_alarm = on_alarm
        self._process: BaseProcess | None = None
        self._connection: Connection | None = None
        self._backoff = RestartBackoff()
        self._started_at = 0.0

    def _spawn(self) -> None:
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        process = context.Process(
            target=audit_in_process,
            args=(self._settings, theirs, logging.getLogger().getEffectiveLevel()),
            name="faultfinder-auditor",
            daemon=True,
        )
        process.start()
        self._started_at = time.monotonic()
        theirs.close()
        self._process, self._connection = process, ours

    async def start(self) -> None:
        await asyncio.to_thread(self._spawn)
        await super().start()

    async def run(self) -> None:
        while not self.stopping:
            connection = self._connection
            assert connection is not None
            try:
                await _readable(connection)
                alarm = connection.recv()
            except (EOFError, OSError):
                if self.stopping:
                    return
                await self._restart()
                continue
            if isinstance(alarm, Alarm) and self._on_alarm is not None:
                try:
                    await self._on_alarm(alarm)
                except Exception:
                    log.exception("announcing the alarm on run %s failed", alarm.run_id)

    async def _restart(self) -> None:
        process = self._process
        code = process.exitcode if process is not None else None
        delay = self._backoff.after(time.monotonic() - self._started_at)
        log.error(
            "the online auditor's process ended (exit code %s); starting it again in %g s",
            code,
            delay,
        )
        if await self.pause(delay):
            return
        await asyncio.to_thread(self._end)
        await asyncio.to_thread(self._spawn)

    def _end(self) -> None:
        """Ask the process to stop, then make sure it has."""
        process, connection = self._process, self._connection
        if connection is not None:
            with contextlib.suppress(OSError, EOFError, BrokenPipeError):
                connection.send(_STOP)
        if process is not None:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join()
        if connection is not None:
            connection.close()
        self._process = self._connection = None

    async def stop(self) -> None:
        await super().stop()
        await asyncio.to_thread(self._end)


async def _readable(connection: Connection) -> None:
    """Wait until `connection` has something to read (a message, or the end of the pipe
    when the process is gone)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(connection.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(connection.fileno())


def audit_in_process(settings: Settings, connection: Connection, log_level: int) -> None:
    """The auditor process's body: audit until the serving process says stop or goes."""
    # Ctrl-C reaches the whole process group; the serving process decides when this stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):  # a system that refuses is no reason not to audit
        os.nice(NICENESS)
    from faultfinder.server.logs import configure_logging

    configure_logging(logging.getLevelName(log_level).lower())
    asyncio.run(_audit(settings, connection))


async def _audit(settings: Settings, connection: Connection) -> None:
    from faultfinder.server.composition import Composition, ProcessKind

    service = await Composition(settings, ProcessKind.AUDITOR).open()

    async def forward(alarm: Alarm) -> None:
        with contextlib.suppress(OSError, BrokenPipeError):
            connection.send(alarm)

    try:
        async with service.online_auditor(on_alarm=forward):
            # Until the serving process says stop, or goes: its end of the pipe closes
            # then, which reads as the end of the pipe here.
            await _readable(connection)
    finally:
        await service.aclose()
