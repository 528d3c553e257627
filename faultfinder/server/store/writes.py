"""What a span write does to its runs: each write call's `RunDelta` per run, merged into
the stored row by one upsert statement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Insert, and_, case, func, null, or_

from faultfinder import conventions as c
from faultfinder.reading.model import SpanRecord, StatusCode
from faultfinder.server.db.models import RunOutcome, RunStatus
from faultfinder.server.store.tables import RUNS, clean_text

__all__ = ["RunDelta", "known_outcome", "runs_upsert"]


def known_outcome(value: str | None) -> str | None:
    """`value` if it is an outcome the store records, else None."""
    return value if value in (RunOutcome.SUCCESS, RunOutcome.FAILURE) else None


@dataclass(slots=True)
class RunDelta:
    """What one write call adds to one run, merged into the stored row in SQL."""

    id: str
    project: str
    started_at: int
    ended_at: int
    n_spans: int = 0
    root_span_id: str | None = None
    root_started_at: int | None = None
    root_ended_at: int | None = None
    root_error: bool = False
    work_error: bool = False
    local_parent: bool = False
    outcome: str | None = None
    outcome_reason: str | None = None
    task: str | None = None
    ground_truth: str | None = None
    final_answer: str | None = None

    def add(
        self, span: SpanRecord, *, is_root: bool, outcome: str | None, local_parent: bool = False
    ) -> None:
        self.n_spans += 1
        self.local_parent = self.local_parent or local_parent
        self.started_at = min(self.started_at, span.start_time_unix_nano)
        self.ended_at = max(self.ended_at, span.end_time_unix_nano)
        if is_root:
            if self.root_started_at is None or span.start_time_unix_nano < self.root_started_at:
                self.root_span_id = span.span_id
                self.root_started_at = span.start_time_unix_nano
                self.root_ended_at = span.end_time_unix_nano
            if span.status_code == StatusCode.ERROR:
                self.root_error = True
        elif span.status_code == StatusCode.ERROR:
            self.work_error = True
        attrs = span.attributes
        reason = clean_text(attrs.get(c.RUN_OUTCOME_REASON))
        if outcome is not None and self.outcome != RunOutcome.FAILURE:
            self.outcome, self.outcome_reason = outcome, reason
        elif reason is not None and self.outcome_reason is None:
            self.outcome_reason = reason
        self.task = clean_text(attrs.get(c.RUN_TASK)) or self.task
        self.ground_truth = clean_text(attrs.get(c.RUN_GROUND_TRUTH)) or self.ground_truth
        self.final_answer = clean_text(attrs.get(c.RUN_FINAL_ANSWER)) or self.final_answer

    def row(self, now: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "project": self.project,
            "status": RunStatus.RUNNING.value,
            "root_span_id": self.root_span_id,
            "root_started_at": self.root_started_at,
            "root_ended_at": self.root_ended_at,
            "root_error": self.root_error,
            "work_error": self.work_error,
            "local_parent": self.local_parent,
            "unfinished": False,
            "recovered_checked_at": None,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "last_span_received_at": now,
            "n_spans": self.n_spans,
            "outcome": self.outcome,
            "outcome_reason": self.outcome_reason,
            "outcome_posted_at": None,
            "task": self.task,
            "ground_truth": self.ground_truth,
            "final_answer": self.final_answer,
            "completed_at": None,
            "created_at": now,
            "updated_at": now,
            "version": 1,
            # A running run is found by the sweep through its quiet period; the mark is
            # for finished runs that change. Keeping it off here keeps the marked rows
            # few, so PostgreSQL reads them by index instead of scanning every run.
            "needs_sweep": False,
        }


def runs_upsert(stmt: Any, least: Any, greatest: Any) -> Insert:
    """`INSERT … ON CONFLICT DO UPDATE` of `RunDelta.row`s that merges each into the stored
    run (the rules in `faultfinder.server.store.spans`' docstring)."""
    run, new = RUNS.c, stmt.excluded
    posted = run.outcome_posted_at.is_not(None)
    new_root_is_earlier = and_(
        new.root_span_id.is_not(None),
        or_(run.root_span_id.is_(None), new.root_started_at < run.root_started_at),
    )
    take_new_outcome = and_(
        ~posted,
        new.outcome.is_not(None),
        or_(run.outcome.is_(None), run.outcome != RunOutcome.FAILURE.value),
    )

    def latest(column: str) -> ColumnElement[Any]:
        return func.coalesce(new[column], run[column])

    def unless_posted(column: str) -> ColumnElement[Any]:
        return case((posted, func.coalesce(run[column], new[column])), else_=latest(column))

    upsert: Insert = stmt.on_conflict_do_update(
        index_elements=[run.id],
        set_={
            "n_spans": run.n_spans + new.n_spans,
            "started_at": least(run.started_at, new.started_at),
            "ended_at": greatest(run.ended_at, new.ended_at),
            "last_span_received_at": greatest(run.last_span_received_at, new.last_span_received_at),
            "root_span_id": case((new_root_is_earlier, new.root_span_id), else_=run.root_span_id),
            "root_started_at": case(
                (new_root_is_earlier, new.root_started_at), else_=run.root_started_at
            ),
            "root_ended_at": case(
                (new_root_is_earlier, new.root_ended_at), else_=run.root_ended_at
            ),
            "root_error": or_(run.root_error, new.root_error),
            "work_error": or_(run.work_error, new.work_error),
            "local_parent": or_(run.local_parent, new.local_parent),
            "outcome": case((take_new_outcome, new.outcome), else_=run.outcome),
            "outcome_reason": case(
                (take_new_outcome, new.outcome_reason),
                (posted, run.outcome_reason),
                else_=func.coalesce(run.outcome_reason, new.outcome_reason),
            ),
            "task": latest("task"),
            "ground_truth": unless_posted("ground_truth"),
            "final_answer": unless_posted("final_answer"),
            "updated_at": new.updated_at,
            "version": run.version + 1,
            "needs_sweep": run.status != RunStatus.RUNNING.value,
            # A new span changes the trajectory: the kept shape is out of date.
            "agents": null(),
            "n_steps": null(),
        },
    )
    return upsert
