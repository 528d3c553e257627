"""How the helpers write values onto spans: step text, GenAI semconv messages, errors.

An exception a step of the trajectory already shows is marked, so the turns around it
do not record it as a step of their own again.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable

from opentelemetry.trace import Span, Status, StatusCode

from faultfinder import conventions as c


def as_text(value: object) -> str:
    """A value as step text: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def role_messages(messages: Iterable[tuple[str, str]]) -> str:
    """GenAI semconv messages: `[{"role": …, "parts": [{"type": "text", "content": …}]}]`."""
    return json.dumps(
        [{"role": role, "parts": [{"type": "text", "content": text}]} for role, text in messages],
        ensure_ascii=False,
    )


def text_messages(role: str, texts: Iterable[str]) -> str:
    """`role_messages` of texts all said by one role."""
    return role_messages((role, text) for text in texts)


def _error_type(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def record_error(span: Span, exc: BaseException) -> str:
    """Mark `span` failed by `exc` (status ERROR, `error.type`, the exception recorded);
    return how the error reads in the trajectory."""
    description = describe(exc)
    span.record_exception(exc)
    span.set_attribute(c.ERROR_TYPE, _error_type(exc))
    span.set_status(Status(StatusCode.ERROR, description))
    return description


_STEP_ERROR_MARK = "_faultfinder_step_error"


def mark_as_step_error(exc: BaseException | None) -> None:
    """Remember that a step of the trajectory already shows `exc`."""
    if exc is not None:
        with contextlib.suppress(AttributeError, TypeError):
            setattr(exc, _STEP_ERROR_MARK, True)


def is_step_error(exc: BaseException) -> bool:
    return bool(getattr(exc, _STEP_ERROR_MARK, False))
