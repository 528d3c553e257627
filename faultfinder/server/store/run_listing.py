"""The span store's read queries: a page of runs, their attributions, and the carriers of
GenAI log records that a run grouped other than by trace takes from its traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, and_, exists, func, or_, select
from sqlalchemy.engine import Connection

from faultfinder import conventions as c
from faultfinder.attributors.model import Attribution
from faultfinder.reading.mapping import is_log_events_carrier
from faultfinder.reading.model import SpanRecord
from faultfinder.server.store.rows import RunRow, decode_cursor, encode_cursor, span_record
from faultfinder.server.store.tables import ATTRIBUTIONS, RUNS, SPANS

__all__ = [
    "attributions_of_runs",
    "carriers_of_their_traces",
    "listing",
    "page_of",
    "start_order",
]


def listing(
    *,
    status: str | None,
    project: str | None,
    limit: int,
    cursor: str | None,
    blamed_agent: str | None,
    since_ns: int | None,
    until_ns: int | None,
) -> Select[Any]:
    """The query of `SpanStore.list_runs`: its page and one run more (is there a next?)."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    statement = select(RUNS).order_by(RUNS.c.created_at.desc(), RUNS.c.id.desc())
    if status is not None:
        statement = statement.where(RUNS.c.status == status)
    if project is not None:
        statement = statement.where(RUNS.c.project == project)
    if blamed_agent is not None:
        statement = statement.where(
            exists().where(
                ATTRIBUTIONS.c.run_id == RUNS.c.id,
                ATTRIBUTIONS.c.status == "ok",
                func.lower(ATTRIBUTIONS.c.agent) == blamed_agent.lower(),
            )
        )
    if since_ns is not None:
        statement = statement.where(RUNS.c.started_at >= since_ns)
    if until_ns is not None:
        statement = statement.where(RUNS.c.started_at < until_ns)
    if cursor is not None:
        created_at, run_id = decode_cursor(cursor)
        statement = statement.where(
            or_(
                RUNS.c.created_at < created_at,
                and_(RUNS.c.created_at == created_at, RUNS.c.id < run_id),
            )
        )
    return statement.limit(limit + 1)


def page_of(runs: list[RunRow], limit: int) -> tuple[list[RunRow], str | None]:
    """The page of `listing`'s rows, and the cursor of the next (None after the last)."""
    if len(runs) <= limit:
        return runs, None
    page = runs[:limit]
    return page, encode_cursor(page[-1])


def attributions_of_runs(conn: Connection, run_ids: Sequence[str]) -> dict[str, list[Attribution]]:
    """Attributions of these runs, oldest first."""
    if not run_ids:
        return {}
    statement = (
        select(ATTRIBUTIONS.c.run_id, ATTRIBUTIONS.c.payload)
        .where(ATTRIBUTIONS.c.run_id.in_(list(run_ids)))
        .order_by(ATTRIBUTIONS.c.id)
    )
    found: dict[str, list[Attribution]] = {}
    for row in conn.execute(statement):
        found.setdefault(row.run_id, []).append(Attribution.model_validate(row.payload))
    return found


def start_order(span: SpanRecord) -> tuple[int, str, str]:
    return span.start_time_unix_nano, span.trace_id, span.span_id


def carriers_of_their_traces(
    conn: Connection, spans_of_runs: dict[str, list[SpanRecord]]
) -> dict[str, list[SpanRecord]]:
    """The carriers of GenAI log records (`otlp/log_events.py`) that belong to runs not
    keyed by their trace, by run.

    A log record names its span by trace and span id only, with none of the attributes
    that key a run otherwise (`faultfinder.run.id`, a conversation id), so its carrier is
    stored under its trace. A run grouped by those attributes takes the carriers stored
    under each of its spans' traces; the assembler keeps those whose span is in the run.
    """
    wanted: dict[str, set[str]] = {}
    for run_id, spans in spans_of_runs.items():
        for trace_id in {span.trace_id for span in spans} - {run_id}:
            wanted.setdefault(trace_id, set()).add(run_id)
    if not wanted:
        return {}
    statement = select(SPANS).where(
        SPANS.c.run_id.in_(sorted(wanted)), SPANS.c.name == c.LOG_EVENTS_SPAN
    )
    found: dict[str, list[SpanRecord]] = {}
    for row in conn.execute(statement):
        carrier = span_record(row)
        if is_log_events_carrier(carrier):
            for run_id in wanted[carrier.trace_id]:
                found.setdefault(run_id, []).append(carrier)
    return found
