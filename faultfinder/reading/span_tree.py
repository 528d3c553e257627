"""How a run's spans hang together: a span's key and the chain of its ancestors.

Shared by the assembler and the passes that fold one span's facts into another's
(`folding.py`); pure, over `SpanRecord`s of one run.
"""

from __future__ import annotations

from collections.abc import Iterable

from faultfinder.reading.model import SpanRecord

__all__ = ["SpanKey", "ancestors", "span_key"]

SpanKey = tuple[str, str]
"""(trace id, span id): a span's identity within a run."""


def span_key(span: SpanRecord) -> SpanKey:
    return (span.trace_id, span.span_id)


def ancestors(key: SpanKey, parent_of: dict[SpanKey, SpanKey]) -> Iterable[SpanKey]:
    """The keys above `key`, nearest first; stops at a cycle (a parent seen before)."""
    seen = {key}
    parent = parent_of.get(key)
    while parent is not None and parent not in seen:
        yield parent
        seen.add(parent)
        parent = parent_of.get(parent)
