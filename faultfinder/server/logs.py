"""The sidecar's log lines: one record, one line.

Run ids, agent names and span names come from the agents' telemetry, so a message may
carry a newline or a terminal escape; `OneLineFormatter` writes such characters as
escapes (`\\n`, `\\x1b`) so that no message can forge a log line of its own. A
traceback still follows its record on lines of its own.
"""

from __future__ import annotations

import logging
import logging.handlers
import re

from litestar.logging.config import LoggingConfig

__all__ = [
    "FORMAT",
    "OneLineFormatter",
    "configure_logging",
    "flush_logs",
    "logging_config",
    "one_line",
]

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """`text` with its control characters (newlines included) written as escapes."""
    return _CONTROL.sub(lambda match: match.group().encode("unicode_escape").decode(), text)


class OneLineFormatter(logging.Formatter):
    """A formatter whose messages never span lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = one_line(record.message)
        return super().formatMessage(record)


def configure_logging(level: str) -> None:
    """The root logger at `level`, writing one line per record to stderr."""
    handler = logging.StreamHandler()
    handler.setFormatter(OneLineFormatter(FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def logging_config() -> LoggingConfig:
    """The web app's logging: Litestar's queue handler (records are written off the event
    loop) with `OneLineFormatter`, at the level `configure_logging` set (INFO if none)."""
    root = logging.getLogger()
    level = logging.getLevelName(root.level) if root.handlers else "INFO"
    return LoggingConfig(
        formatters={"standard": {"()": OneLineFormatter, "format": FORMAT}},
        root={"handlers": ["queue_listener"], "level": level},
    )


def flush_logs() -> None:
    """Write out every record still waiting in a queue handler's listener thread.

    The web app logs through a queue (`logging_config`) that is otherwise emptied at
    exit, but a server stopped by SIGTERM ends by re-raising the signal, and a process
    killed by its signal runs no exit hooks: the last records before it (the shutdown's
    own, such as spans given up as unstored) would be lost. The listener is stopped,
    which drains its queue, and started again, so later records are still written.
    """
    for handler in logging.getLogger().handlers:
        listener = getattr(handler, "listener", None)
        # (a listener never started, or stopped at exit, has no thread to drain)
        if isinstance(listener, logging.handlers.QueueListener) and listener._thread:
            listener.stop()
            listener.start()
        handler.flush()
