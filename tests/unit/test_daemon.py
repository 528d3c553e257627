"""The daemon base every background loop of the sidecar is built on."""

from __future__ import annotations

import asyncio

import pytest

from faultfinder.server.daemon import Daemon, PeriodicDaemon


class Flaky(PeriodicDaemon):
    name = "flaky"

    def __init__(self) -> None:
        super().__init__(interval=0.01)
        self.ticks = 0

    async def tick(self) -> None:
        self.ticks += 1
        if self.ticks % 2:
            raise RuntimeError("the database is briefly down")


class Draining(Daemon):
    drain_on_stop = True

    def __init__(self) -> None:
        super().__init__()
        self.queue = [1, 2, 3]
        self.done: list[int] = []
        self.wake = asyncio.Event()

    def stop_requested(self) -> None:
        self.wake.set()

    async def run(self) -> None:
        await self.wake.wait()
        while self.queue:
            self.done.append(self.queue.pop(0))
            await asyncio.sleep(0)


async def test_a_failed_round_is_logged_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with Flaky() as daemon:
        for _ in range(200):
            if daemon.ticks >= 4:
                break
            await asyncio.sleep(0.01)
        assert daemon.running
    assert daemon.ticks >= 4
    assert not daemon.running
    assert "flaky: a round failed" in caplog.text


async def test_a_draining_daemon_finishes_its_work_before_it_stops() -> None:
    daemon = Draining()
    await daemon.start()
    await asyncio.sleep(0.01)
    assert daemon.done == []
    await daemon.stop()
    assert daemon.done == [1, 2, 3]


async def test_a_daemon_cannot_start_twice_and_can_start_again_after_stopping() -> None:
    daemon = Flaky()
    await daemon.start()
    with pytest.raises(RuntimeError, match="already running"):
        await daemon.start()
    await daemon.stop()
    await daemon.start()
    assert daemon.running
    await daemon.stop()


async def test_pause_returns_early_when_the_daemon_is_stopped() -> None:
    class Sleeper(Daemon):
        woke: bool | None = None

        async def run(self) -> None:
            self.woke = await self.pause(3600)

    sleeper = Sleeper()
    sleeper.drain_on_stop = True
    await sleeper.start()
    await asyncio.sleep(0)
    await asyncio.wait_for(sleeper.stop(), 5)
    assert sleeper.woke is True
