"""Database errors judged without reading their data: whether retrying may help (the
database, not the data, was the problem) and a name for logs that quotes no span content.
"""

from __future__ import annotations

import logging

from sqlalchemy import exc as sa_exc

__all__ = ["error_class", "is_transient", "log_round_failure", "retry_reason"]

_TRANSIENT_SQLITE_CODES = frozenset({3, 5, 6, 8, 9, 10, 13, 14, 15})
"""Primary SQLite result codes worth retrying: PERM, BUSY, LOCKED, READONLY, INTERRUPT,
IOERR, FULL, CANTOPEN, PROTOCOL: the database, not the span, is at fault, and storing it
later may work. Others (TOOBIG, CONSTRAINT, MISMATCH, ERROR …) fail every time."""

_TRANSIENT_SQLSTATE_PREFIXES = ("08", "25006", "40", "42501", "53", "55P03", "57", "58")
"""PostgreSQL error classes worth retrying: connection exceptions, a read-only
transaction (a standby after failover, `default_transaction_read_only`), transaction
rollback (serialization failure, deadlock), a missing privilege, insufficient
resources, lock not available, operator intervention (shutdown, statement timeout) and
system (I/O) errors."""


def is_transient(error: BaseException) -> bool:
    """Whether storing the same spans again may succeed (the database, not the data,
    was the problem)."""
    if isinstance(error, sa_exc.DBAPIError):
        if error.connection_invalidated:
            return True
        original = error.orig
        code = getattr(original, "sqlite_errorcode", None)
        if isinstance(code, int):
            return code & 0xFF in _TRANSIENT_SQLITE_CODES
        state = getattr(original, "sqlstate", None) or getattr(original, "pgcode", None)
        if isinstance(state, str):
            return state.startswith(_TRANSIENT_SQLSTATE_PREFIXES)
        return isinstance(error, sa_exc.OperationalError | sa_exc.InterfaceError) or isinstance(
            original, OSError | TimeoutError
        )
    if isinstance(error, sa_exc.StatementError) and error.orig is not None:
        # A non-driver error raised while executing (e.g. a socket error): judge the cause.
        return is_transient(error.orig)
    # Pool exhausted, driver-level disconnects and timeouts outside a statement.
    return isinstance(
        error, sa_exc.TimeoutError | sa_exc.DisconnectionError | OSError | TimeoutError
    )


def error_class(error: BaseException) -> str:
    """The error's class and database code, e.g. `IntegrityError (SQLSTATE 23505)`.

    Never the message: SQLAlchemy puts the statement's parameters (span content) in it.
    """
    original = getattr(error, "orig", None)
    name = type(error).__name__
    if original is None:
        return name
    sqlite_name = getattr(original, "sqlite_errorname", None)
    if isinstance(sqlite_name, str):
        return f"{name} ({sqlite_name})"
    state = getattr(original, "sqlstate", None)
    if isinstance(state, str):
        return f"{name} (SQLSTATE {state})"
    return f"{name} ({type(original).__name__})"


def retry_reason(error: BaseException) -> str:
    """What went wrong, fit for a log line: a transient error's driver message ("database
    is locked", "connection refused") quotes no data; anything else is named by class."""
    original = getattr(error, "orig", None)
    if is_transient(error):
        message = str(original if original is not None else error).splitlines()
        return f"{error_class(error)}: {message[0][:200] if message else ''}"
    return error_class(error)


def log_round_failure(log: logging.Logger, what: str, error: BaseException) -> None:
    """Log a background round that failed and will be tried again: one line when the
    database is unavailable (read-only, full, unreachable: it fails every round until it
    is fixed), the traceback for anything else."""
    if is_transient(error):
        log.warning(
            "%s failed, the database is unavailable (%s); trying again", what, retry_reason(error)
        )
    else:
        log.error("%s failed; trying again", what, exc_info=error)
