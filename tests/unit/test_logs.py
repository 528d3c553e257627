"""The sidecar's log lines: what is logged just before the process dies is written."""

from __future__ import annotations

import logging
import logging.handlers
import queue
import time
from collections.abc import Iterator

import pytest

from faultfinder.server.logs import flush_logs, one_line


class _SlowHandler(logging.Handler):
    """A handler that takes a while per record, like a slow terminal or a full pipe."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        time.sleep(0.02)
        self.lines.append(record.getMessage())


@pytest.fixture
def queued_root() -> Iterator[_SlowHandler]:
    """The root logger writing through a queue and a listener thread, as the web app's
    logging configuration does."""
    slow = _SlowHandler()
    records: queue.Queue[logging.LogRecord] = queue.Queue()
    handler = logging.handlers.QueueHandler(records)
    listener = logging.handlers.QueueListener(records, slow)
    handler.listener = listener  # type: ignore[attr-defined]  # as dictConfig sets it
    listener.start()
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    try:
        yield slow
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        listener.stop()


def test_flush_writes_every_queued_record_and_logging_goes_on(queued_root: _SlowHandler) -> None:
    log = logging.getLogger("faultfinder.test")
    for i in range(10):
        log.error("record %d", i)
    assert len(queued_root.lines) < 10  # still queued behind the slow handler
    flush_logs()
    assert queued_root.lines == [f"record {i}" for i in range(10)]
    log.error("after the flush")
    flush_logs()
    assert queued_root.lines[-1] == "after the flush"


def test_a_message_cannot_forge_a_line() -> None:
    forged = "done\n2026-01-01 ERROR forged\x1b[2J"
    assert one_line(forged) == "done\\n2026-01-01 ERROR forged\\x1b[2J"
