"""Bytes per run: what a run's spans hold, and the spans of a run past its byte budget cut
down to their shape.

The span budget (`run_budget.py`) bounds a run in spans, but a span may carry megabytes
(a tool's whole output as `output.value`): 300 such spans stored 250 MB, which the run's
page, its attribution and the online auditor then read whole. Once the spans of a run
hold `MAX_RUN_BYTES`, its further spans keep every attribute, event and step, with each
text value cut to `SHRUNK_VALUE_CHARS` and marked: the run stays readable and
attributable, and costs a bounded amount to store and read.
"""

from __future__ import annotations

from dataclasses import replace

from faultfinder.reading.model import AttributeValue, SpanEvent, SpanRecord

__all__ = ["MAX_RUN_BYTES", "SHRUNK_VALUE_CHARS", "shrunk", "span_bytes"]

MAX_RUN_BYTES = 32 * 1024 * 1024
"""Bytes of attribute values a run's spans keep whole (about: characters of text)."""
SHRUNK_VALUE_CHARS = 4096
"""Longest text value of a span stored after its run passed `MAX_RUN_BYTES`."""


def span_bytes(span: SpanRecord) -> int:
    """About the bytes `span` takes to store: its names, text values and events."""
    total = len(span.name) + len(span.status_message) + _bytes_of(span.attributes)
    for event in span.events:
        total += len(event.name) + _bytes_of(event.attributes)
    return total


def _bytes_of(attributes: dict[str, AttributeValue]) -> int:
    total = 0
    for key, value in attributes.items():
        total += len(key) + (len(value) if isinstance(value, str | bytes) else _nested(value))
    return total


def _nested(value: AttributeValue) -> int:
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, list):
        return sum(_nested(item) for item in value)
    if isinstance(value, dict):
        return sum(len(key) + _nested(item) for key, item in value.items())
    return 8


def shrunk(span: SpanRecord) -> SpanRecord:
    """`span` with each text value longer than `SHRUNK_VALUE_CHARS` cut, and marked."""
    return replace(
        span,
        attributes=_shrunk_attributes(span.attributes),
        events=tuple(
            SpanEvent(event.name, event.time_unix_nano, _shrunk_attributes(event.attributes))
            for event in span.events
        ),
    )


def _shrunk_attributes(attributes: dict[str, AttributeValue]) -> dict[str, AttributeValue]:
    return {key: _shrunk_value(value) for key, value in attributes.items()}


def _shrunk_value(value: AttributeValue) -> AttributeValue:
    if isinstance(value, str):
        if len(value) <= SHRUNK_VALUE_CHARS:
            return value
        cut = len(value) - SHRUNK_VALUE_CHARS
        return f"{value[:SHRUNK_VALUE_CHARS]}…[truncated {cut} chars: the run is over its size]"
    if isinstance(value, bytes):
        return value[:SHRUNK_VALUE_CHARS]
    if isinstance(value, list):
        return [_shrunk_value(item) for item in value]
    if isinstance(value, dict):
        return {key: _shrunk_value(item) for key, item in value.items()}
    return value
