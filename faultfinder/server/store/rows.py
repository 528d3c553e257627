"""Rows as the rest of the sidecar sees them: a stored run, a span's row and back, and
the cursor of a run listing."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Row

from faultfinder.reading.model import SpanEvent, SpanRecord, StatusCode
from faultfinder.server.db.engine import dumps_json
from faultfinder.server.errors import InvalidCursorError, UnknownRunError
from faultfinder.server.store.tables import clean

__all__ = [
    "SPAN_ROW_COLUMNS",
    "InvalidCursorError",
    "RunRow",
    "UnknownRunError",
    "decode_cursor",
    "encode_cursor",
    "span_record",
    "span_row",
]


@dataclass(frozen=True, slots=True)
class RunRow:
    """A stored run as the rest of the server sees it (times are Unix nanoseconds, UTC)."""

    id: str
    project: str
    status: str
    """A `RunStatus` value."""
    root_span_id: str | None
    root_ended: bool
    """The root span has an end time."""
    root_error: bool
    """A span without a parent ended with status ERROR."""
    work_error: bool
    """Some span other than the root ended with status ERROR."""
    local_parent: bool
    """Some span's parent is in the same process: a missing root is still to come."""
    unfinished: bool
    """Finished `failed` because its root never arrived (`unfinished_after`)."""
    started_at: int
    ended_at: int
    last_span_received_at: int
    """Wall clock when a new span of the run was last stored."""
    n_spans: int
    outcome: str | None
    """A `RunOutcome` value, or None while nobody said."""
    outcome_reason: str | None
    outcome_posted_at: int | None
    """Wall clock when an outcome was posted through the API (None: not posted)."""
    task: str | None
    ground_truth: str | None
    final_answer: str | None
    completed_at: int | None
    created_at: int
    updated_at: int
    version: int
    """Incremented on every change of the run row."""
    needs_sweep: bool
    agents: list[str] | None = None
    """The agents of the run's trajectory, kept when the run finishes (`keep_shape`);
    None while it runs and after a span arrives late, until it is settled again."""
    n_steps: int | None = None
    """The trajectory's step count, kept and cleared with `agents`."""

    @classmethod
    def from_row(cls, row: Row[Any] | Mapping[str, Any]) -> RunRow:
        values = row._mapping if isinstance(row, Row) else row
        root_ended_at = values["root_ended_at"]
        return cls(
            id=values["id"],
            project=values["project"],
            status=values["status"],
            root_span_id=values["root_span_id"],
            root_ended=bool(root_ended_at),
            root_error=bool(values["root_error"]),
            work_error=bool(values["work_error"]),
            local_parent=bool(values["local_parent"]),
            unfinished=bool(values["unfinished"]),
            started_at=values["started_at"],
            ended_at=values["ended_at"],
            last_span_received_at=values["last_span_received_at"],
            n_spans=values["n_spans"],
            outcome=values["outcome"],
            outcome_reason=values["outcome_reason"],
            outcome_posted_at=values["outcome_posted_at"],
            task=values["task"],
            ground_truth=values["ground_truth"],
            final_answer=values["final_answer"],
            completed_at=values["completed_at"],
            created_at=values["created_at"],
            updated_at=values["updated_at"],
            version=values["version"],
            needs_sweep=bool(values["needs_sweep"]),
            agents=values.get("agents"),
            n_steps=values.get("n_steps"),
        )


SPAN_ROW_COLUMNS = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "run_id",
    "project",
    "name",
    "kind",
    "start_time_unix_nano",
    "end_time_unix_nano",
    "status_code",
    "status_message",
    "attributes",
    "events",
    "resource_attributes",
    "scope_name",
    "received_at",
)
"""The columns of `span_row`'s tuple, in its order."""


def span_row(
    span: SpanRecord, run_id: str, received_at: int, resource_json: str
) -> tuple[Any, ...]:
    """A span's row as driver parameters in `SPAN_ROW_COLUMNS` order, its JSON columns
    already serialised (`resource_json`: the span's resource attributes, serialised once
    for all the spans that share them)."""
    events = [
        {"name": event.name, "time_unix_nano": event.time_unix_nano, "attributes": event.attributes}
        for event in span.events
    ]
    return (
        span.trace_id,
        span.span_id,
        span.parent_span_id,
        clean(run_id),
        clean(span.project),
        clean(span.name),
        int(span.kind),
        span.start_time_unix_nano,
        span.end_time_unix_nano,
        int(span.status_code),
        clean(span.status_message),
        dumps_json(span.attributes),
        dumps_json(events) if events else "[]",
        resource_json,
        clean(span.scope_name),
        received_at,
    )


def span_record(row: Row[Any]) -> SpanRecord:
    return SpanRecord(
        trace_id=row.trace_id,
        span_id=row.span_id,
        parent_span_id=row.parent_span_id,
        name=row.name,
        start_time_unix_nano=row.start_time_unix_nano,
        end_time_unix_nano=row.end_time_unix_nano,
        kind=row.kind,
        status_code=StatusCode(row.status_code),
        status_message=row.status_message,
        attributes=row.attributes,
        events=tuple(
            SpanEvent(
                name=event["name"],
                time_unix_nano=event["time_unix_nano"],
                attributes=event.get("attributes") or {},
            )
            for event in row.events
        ),
        resource_attributes=row.resource_attributes,
        scope_name=row.scope_name,
        project=row.project,
        run_id=row.run_id,
    )


def encode_cursor(run: RunRow) -> str:
    raw = orjson.dumps([run.created_at, run.id])
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, run_id = orjson.loads(raw)
    except (binascii.Error, ValueError, TypeError, orjson.JSONDecodeError):
        raise InvalidCursorError(f"cursor {cursor!r} is not one returned by listing runs") from None
    if not isinstance(created_at, int) or not isinstance(run_id, str):
        raise InvalidCursorError(f"cursor {cursor!r} is not one returned by listing runs")
    return created_at, run_id
