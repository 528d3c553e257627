"""`faultfinder worker`: attribution workers without the HTTP server (an optional heartbeat
file stands in for health endpoints)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path

from faultfinder.attributors.model import Attribution
from faultfinder.server.composition import Composition, ProcessKind, publish_attribution
from faultfinder.server.settings import Settings

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 10.0
"""Seconds between touches of the heartbeat file."""


async def run_workers(settings: Settings, *, heartbeat: Path | None = None) -> None:
    """Claim and run attribution jobs until SIGINT/SIGTERM; with `heartbeat`, keep that
    file's modification time fresh while the workers run (see `beat_until`)."""
    composition = Composition(settings, ProcessKind.WORKER)  # loads the attributor plugins
    service = await composition.open()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        async with service.webhooks() as hooks:

            async def announce(run_id: str | None, result: Attribution) -> None:
                publish_attribution(hooks, run_id, result)

            async with service.attribution_worker(on_attribution=announce) as worker:
                slots = ", ".join(
                    f"{count} for {lane.name} attributors" for lane, count in worker.lanes()
                )
                log.info("worker %s running job slot(s): %s", worker.worker_id, slots)
                await beat_until(stop, heartbeat)
    finally:
        await service.aclose()


async def beat_until(stop: asyncio.Event, heartbeat: Path | None) -> None:
    """Wait for `stop`, touching `heartbeat` every `HEARTBEAT_INTERVAL_S` meanwhile and
    removing it at the end: a probe reading the file's age learns that the workers started
    and that their event loop still turns (the worker has no HTTP port to ask)."""
    if heartbeat is None:
        await stop.wait()
        return
    heartbeat.parent.mkdir(parents=True, exist_ok=True)
    try:
        while not stop.is_set():
            heartbeat.touch()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), HEARTBEAT_INTERVAL_S)
    finally:
        heartbeat.unlink(missing_ok=True)
