"""Request and response bodies of the HTTP API (separate from the table models)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from faultfinder.attributors.model import Attribution, Trajectory


class RunSummary(BaseModel):
    id: str
    project: str
    status: str
    agents: list[str]
    n_steps: int
    n_spans: int
    outcome: str | None = None
    started_at: float | None = None
    """Unix seconds of the earliest span start."""
    ended_at: float | None = None
    attributions: list[Attribution] = []


class RunPage(BaseModel):
    items: list[RunSummary]
    next_cursor: str | None = None


class RunDetail(RunSummary):
    trajectory: Trajectory


class IngestStats(BaseModel):
    spans_stored: int
    """Spans queryable in the database now."""
    spans_received: int
    spans_acknowledged: int
    queued_spans: int
    spans_rejected: dict[str, int]
    requests_rejected: dict[str, int]
    write_errors: int
    batches_written: int


class Health(BaseModel):
    status: str
    details: dict[str, Any] = {}
