"""The sidecar's tables (SQLModel `table=True`): spans, runs, attributions, jobs, labels,
alarms, and the nightly benchmark's runs and history.

The Alembic migrations in `faultfinder/server/db/migrations/` are the source of truth for the
schema; these classes must match them (a test compares both on SQLite and PostgreSQL).

Conventions:

- Every time is an integer of Unix **nanoseconds, UTC** (`BigInteger`): span times
  come that way from OTLP and the wall-clock columns (`received_at`, `created_at`,
  …) use the same unit so they compare without conversion and without time zones.
- JSON columns are `JSON` on SQLite and `JSONB` on PostgreSQL.
- Index and constraint names are explicit so migrations and models agree on both
  dialects.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

JSONColumn = JSON().with_variant(JSONB(), "postgresql")
"""Portable JSON column type: JSON on SQLite, JSONB on PostgreSQL."""


class RunStatus(StrEnum):
    """Where a run is in its lifecycle (`runs.status`)."""

    RUNNING = "running"
    """Spans are still arriving (or may still arrive: the quiet period has not passed)."""
    COMPLETE = "complete"
    """Finished without a failure signal."""
    FAILED = "failed"
    """Finished and failed: root span ERROR or outcome `failure`; awaits attribution."""
    ATTRIBUTED = "attributed"
    """The attribution service has stored its attributions for this failed run."""


class RunOutcome(StrEnum):
    """An explicit verdict on a run, from a span attribute or posted through the API."""

    SUCCESS = "success"
    FAILURE = "failure"


class SpanTable(SQLModel, table=True):
    """One stored span; idempotent by (trace_id, span_id)."""

    __tablename__ = "spans"
    __table_args__ = (
        PrimaryKeyConstraint("trace_id", "span_id", name="pk_spans"),
        # Serves "all spans of a run in start order", the assembler's only query.
        Index("ix_spans_run_id_start", "run_id", "start_time_unix_nano"),
    )

    trace_id: str = Field(sa_column=Column(String(32), primary_key=True))
    """32 lowercase hex characters."""
    span_id: str = Field(sa_column=Column(String(16), primary_key=True))
    """16 lowercase hex characters."""
    parent_span_id: str | None = Field(default=None, sa_column=Column(String(16), nullable=True))
    run_id: str = Field(sa_column=Column(String, nullable=False))
    """The run this span belongs to, as the decoder stamped it (`reading.runs.run_id_of`)."""
    project: str = Field(sa_column=Column(String, nullable=False))
    name: str = Field(sa_column=Column(String, nullable=False))
    kind: int = Field(sa_column=Column(SmallInteger, nullable=False))
    """OTLP SpanKind number."""
    start_time_unix_nano: int = Field(sa_column=Column(BigInteger, nullable=False))
    end_time_unix_nano: int = Field(sa_column=Column(BigInteger, nullable=False))
    status_code: int = Field(sa_column=Column(SmallInteger, nullable=False))
    """OTLP status code: 0 unset, 1 ok, 2 error."""
    status_message: str = Field(sa_column=Column(Text, nullable=False))
    attributes: dict[str, Any] = Field(sa_column=Column(JSONColumn, nullable=False))
    events: list[dict[str, Any]] = Field(sa_column=Column(JSONColumn, nullable=False))
    """List of `{"name", "time_unix_nano", "attributes"}` objects."""
    resource_attributes: dict[str, Any] = Field(sa_column=Column(JSONColumn, nullable=False))
    scope_name: str = Field(sa_column=Column(String, nullable=False))
    received_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    """Wall clock (Unix ns) when the span was stored."""


class RunTable(SQLModel, table=True):
    """One run (a trace, or a conversation when grouping by conversation) and its lifecycle."""

    __tablename__ = "runs"
    __table_args__ = (
        PrimaryKeyConstraint("id", name="pk_runs"),
        # Newest-first listing with a (created_at, id) cursor.
        Index("ix_runs_created_at_id", "created_at", "id"),
        # The lifecycle sweep: running runs that have been quiet since a cut-off.
        Index("ix_runs_status_last_span", "status", "last_span_received_at"),
        # Finished runs that changed since the lifecycle last looked at them.
        Index("ix_runs_needs_sweep_status", "needs_sweep", "status"),
    )

    id: str = Field(sa_column=Column(String, primary_key=True))
    """The run id."""
    project: str = Field(sa_column=Column(String, nullable=False))
    """Project of the first span seen for the run."""
    status: str = Field(sa_column=Column(String(16), nullable=False))
    """A `RunStatus` value."""
    root_span_id: str | None = Field(default=None, sa_column=Column(String(16), nullable=True))
    """The earliest-starting span without a parent (or with a parent in another process);
    null while only orphans arrived."""
    root_started_at: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    root_ended_at: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    """End time of the root span; 0 or null while it has not ended."""
    root_error: bool = Field(sa_column=Column(Boolean, nullable=False))
    """Some span without a parent ended with status ERROR."""
    work_error: bool = Field(
        default=False,
        sa_column=Column(Boolean, nullable=False, server_default=false()),
    )
    """Some span other than the root ended with status ERROR: the lifecycle reads the
    run's spans to tell whether that error ended its work (`lifecycle.work_failed`)."""
    local_parent: bool = Field(
        default=False,
        sa_column=Column(Boolean, nullable=False, server_default=false()),
    )
    """Some span's sender said its parent is in the same process (OTLP span flags): while
    no root has arrived, the run's root is still to come (open, or lost in a crash), so
    the run waits `unfinished_after`, not the quiet period."""
    unfinished: bool = Field(
        default=False,
        sa_column=Column(Boolean, nullable=False, server_default=false()),
    )
    """The run was finished `failed` because its root never arrived: its process
    crashed, was killed or hung before ending it (or an exporter dropped it)."""
    recovered_checked_at: int | None = Field(
        default=None, sa_column=Column(BigInteger, nullable=True)
    )
    """For a run awaiting its root: `last_span_received_at` when the lifecycle last read
    its spans and found its errors recovered from; it reads them again only once another
    span arrived."""
    started_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    """Earliest span start (Unix ns)."""
    ended_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    """Latest span end (Unix ns)."""
    last_span_received_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    """Wall clock (Unix ns) when a new span of this run was last stored: the quiet period
    is measured from here."""
    n_spans: int = Field(sa_column=Column(Integer, nullable=False))
    outcome: str | None = Field(default=None, sa_column=Column(String(16), nullable=True))
    """A `RunOutcome` value or null."""
    outcome_reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    outcome_posted_at: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    """Wall clock (Unix ns) when an outcome was posted through the API; such an outcome
    completes the run at once and is not overridden by span attributes."""
    task: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    ground_truth: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    final_answer: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    completed_at: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    """Wall clock (Unix ns) when the run left `running`."""
    created_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    updated_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    version: int = Field(sa_column=Column(Integer, nullable=False))
    """Incremented on every change of the row."""
    needs_sweep: bool = Field(sa_column=Column(Boolean, nullable=False))
    """Set by a span write to a finished run and by a posted outcome, cleared by the
    lifecycle sweep once it has looked at the run: lets the sweep re-check finished runs
    (a late failure) without scanning them all."""
    agents: list[str] | None = Field(default=None, sa_column=Column(JSONColumn, nullable=True))
    """The agents of the run's trajectory, kept when the lifecycle finishes the run, so
    listings and search need not assemble it from its spans; null while the run runs,
    and cleared (with `n_steps`) when a span arrives after it finished."""
    n_steps: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    """The trajectory's step count; kept and cleared with `agents`."""


class AttributionTable(SQLModel, table=True):
    """One attribution of a failed run by one method."""

    __tablename__ = "attributions"
    __table_args__ = (
        PrimaryKeyConstraint("id", name="pk_attributions"),
        Index("ix_attributions_run_id", "run_id"),
    )

    # Integer, not BigInteger: on SQLite only INTEGER PRIMARY KEY autoincrements.
    id: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True))
    run_id: str = Field(
        sa_column=Column(
            String,
            ForeignKey("runs.id", ondelete="CASCADE", name="fk_attributions_run_id_runs"),
            nullable=False,
        )
    )
    method: str = Field(sa_column=Column(String, nullable=False))
    status: str = Field(sa_column=Column(String(16), nullable=False))
    """An `AttributionStatus` value."""
    agent: str | None = Field(default=None, sa_column=Column(String, nullable=True))
    step: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    payload: dict[str, Any] = Field(sa_column=Column(JSONColumn, nullable=False))
    """The whole `faultfinder.attributors.model.Attribution` as JSON."""
    created_at: int = Field(sa_column=Column(BigInteger, nullable=False))


class JobStatus(StrEnum):
    """Where an attribution job is (`jobs.status`)."""

    QUEUED = "queued"
    """Waiting for a worker (possibly not before `not_before`, after a failed attempt)."""
    RUNNING = "running"
    """Claimed by a worker whose lease has not expired."""
    DONE = "done"
    """Finished with an attribution stored."""
    FAILED = "failed"
    """Gave up after its last attempt; `last_error` says why."""


class JobTable(SQLModel, table=True):
    """One attribution job: run a named attributor on a run (or on a posted trajectory)."""

    __tablename__ = "jobs"
    __table_args__ = (
        PrimaryKeyConstraint("id", name="pk_jobs"),
        # The claim query: queued jobs that are due, oldest first.
        Index("ix_jobs_status_not_before", "status", "not_before"),
        Index("ix_jobs_run_id", "run_id"),
        # A run gets its automatic jobs once, whichever replica notices it failed.
        Index("ux_jobs_run_attributor_trigger", "run_id", "attributor", "trigger", unique=True),
    )

    id: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True))
    run_id: str | None = Field(default=None, sa_column=Column(String, nullable=True))
    """The run to attribute; null for an ad-hoc trajectory carried in `payload`."""
    attributor: str = Field(sa_column=Column(String, nullable=False))
    trigger: str = Field(sa_column=Column(String, nullable=False))
    """`auto` for jobs the lifecycle enqueues, a unique `manual-…` token for requests."""
    status: str = Field(sa_column=Column(String(16), nullable=False))
    """A `JobStatus` value."""
    attempts: int = Field(sa_column=Column(Integer, nullable=False))
    max_attempts: int = Field(sa_column=Column(Integer, nullable=False))
    not_before: int = Field(sa_column=Column(BigInteger, nullable=False))
    """Unix ns before which the job is not claimed (retry backoff)."""
    lease_until: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    """While running: Unix ns when the claim expires unless the worker renews it."""
    worker: str | None = Field(default=None, sa_column=Column(String, nullable=True))
    last_error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    attribution_id: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    payload: dict[str, Any] | None = Field(
        default=None, sa_column=Column(JSONColumn, nullable=True)
    )
    """Ad-hoc jobs: `{"trajectory": …, "options": …}`."""
    created_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    updated_at: int = Field(sa_column=Column(BigInteger, nullable=False))


class LabelTable(SQLModel, table=True):
    """A verdict on who and when a run failed (the gold for live accuracy and training):
    a person's, or the exact answer of a controlled failure injection."""

    __tablename__ = "labels"
    __table_args__ = (
        PrimaryKeyConstraint("id", name="pk_labels"),
        Index("ix_labels_run_id", "run_id"),
    )

    id: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True))
    run_id: str = Field(
        sa_column=Column(
            String,
            ForeignKey("runs.id", ondelete="CASCADE", name="fk_labels_run_id_runs"),
            nullable=False,
        )
    )
    agent: str = Field(sa_column=Column(String, nullable=False))
    step: int = Field(sa_column=Column(Integer, nullable=False))
    reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    author: str | None = Field(default=None, sa_column=Column(String, nullable=True))
    created_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    mode: str | None = Field(default=None, sa_column=Column(String, nullable=True))
    """The error mode's code (INJECTION.md's taxonomy, e.g. `R.3`), when known."""
    source: str = Field(
        default="human", sa_column=Column(String, nullable=False, server_default="human")
    )
    """`human` or `injected`."""
    details: dict[str, Any] | None = Field(
        default=None, sa_column=Column(JSONColumn, nullable=True)
    )
    """An injected label's attempt: the original and the injected text, the model call."""


class AlarmTable(SQLModel, table=True):
    """An early alarm: the online auditor's suspect step, raised while the run was running."""

    __tablename__ = "alarms"
    __table_args__ = (
        PrimaryKeyConstraint("id", name="pk_alarms"),
        # One alarm per run: the first step that crossed the threshold.
        Index("ux_alarms_run_id", "run_id", unique=True),
    )

    id: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True))
    run_id: str = Field(
        sa_column=Column(
            String,
            ForeignKey("runs.id", ondelete="CASCADE", name="fk_alarms_run_id_runs"),
            nullable=False,
        )
    )
    step: int = Field(sa_column=Column(Integer, nullable=False))
    agent: str = Field(sa_column=Column(String, nullable=False))
    score: float = Field(sa_column=Column(Float, nullable=False))
    threshold: float = Field(sa_column=Column(Float, nullable=False))
    steps_seen: int = Field(sa_column=Column(Integer, nullable=False))
    """Steps of the run that had arrived when the alarm was raised."""
    created_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    """Why the step: what set it apart from the steps seen so far (none before 0004)."""


class BenchVerdict(StrEnum):
    """The regression gate's verdict on one nightly benchmark entry (`bench_history.verdict`)."""

    FIRST = "first"
    """No earlier accepted entry of the same (dataset, attributor, settings) to compare with."""
    PASS = "pass"
    """No change beyond noise against the baseline on the records both scored."""
    IMPROVED = "improved"
    """Better beyond noise on some gated metric, worse beyond noise on none."""
    REGRESSION = "regression"
    """Worse beyond noise on some gated metric: the entry is not accepted as a baseline."""


class BenchRunTable(SQLModel, table=True):
    """One run of a nightly benchmark suite (`faultfinder bench nightly`): what it planned;
    its entries are rows of `bench_history`. A run that has not finished can be resumed."""

    __tablename__ = "bench_runs"
    __table_args__ = (
        PrimaryKeyConstraint("id", name="pk_bench_runs"),
        # The newest unfinished run of a suite (resuming) and the newest runs (dashboard).
        Index("ix_bench_runs_suite_started", "suite", "started_at"),
    )

    id: str = Field(sa_column=Column(String, primary_key=True))
    """The suite run's id (chosen with `--run-id`, else a UTC time stamp and a random tail)."""
    suite: str = Field(sa_column=Column(String, nullable=False))
    """The suite's name."""
    digest: str = Field(sa_column=Column(String(64), nullable=False))
    """SHA-256 of the suite as parsed: a run is resumed only with the same suite."""
    code_version: str = Field(sa_column=Column(String, nullable=False))
    plan: list[dict[str, Any]] = Field(sa_column=Column(JSONColumn, nullable=False))
    """Each planned entry: `{"entry", "skipped": reason or null}`."""
    started_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    finished_at: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    """Null while entries are still to be run (interrupted, or running now)."""


class BenchHistoryTable(SQLModel, table=True):
    """One scored entry of a nightly run: a dataset, an attributor and its settings, with
    the accuracy figures, every record's correctness and the regression gate's verdict."""

    __tablename__ = "bench_history"
    __table_args__ = (
        PrimaryKeyConstraint("id", name="pk_bench_history"),
        # A suite run stores each of its entries once, however often it is resumed.
        UniqueConstraint("run_id", "entry", name="ux_bench_history_run_entry"),
        # An entry's history in order: its baseline, its trend, its latest score.
        Index("ix_bench_history_entry_id", "entry", "id"),
    )

    id: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True))
    run_id: str = Field(
        sa_column=Column(
            String,
            ForeignKey("bench_runs.id", ondelete="CASCADE", name="fk_bench_history_run_id"),
            nullable=False,
        )
    )
    entry: str = Field(sa_column=Column(String, nullable=False))
    """`dataset/attributor/settings`, the names the suite gives them: the key under which
    entries of successive runs are compared."""
    dataset: str = Field(sa_column=Column(String, nullable=False))
    attributor: str = Field(sa_column=Column(String, nullable=False))
    settings: str = Field(sa_column=Column(String, nullable=False))
    method: str = Field(sa_column=Column(String, nullable=False))
    """The registered attributor that answered (the suite may name it otherwise)."""
    code_version: str = Field(sa_column=Column(String, nullable=False))
    model: str | None = Field(default=None, sa_column=Column(String, nullable=True))
    """The model of an LLM method (null for the others)."""
    started_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    created_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    """When the entry was scored and stored (Unix ns)."""
    wall_time_s: float = Field(sa_column=Column(Float, nullable=False))
    n_records: int = Field(sa_column=Column(Integer, nullable=False))
    agent_accuracy: float = Field(sa_column=Column(Float, nullable=False))
    step_accuracy: float = Field(sa_column=Column(Float, nullable=False))
    llm_calls: int = Field(sa_column=Column(Integer, nullable=False))
    prompt_tokens: int = Field(sa_column=Column(BigInteger, nullable=False))
    completion_tokens: int = Field(sa_column=Column(BigInteger, nullable=False))
    figures: dict[str, Any] = Field(sa_column=Column(JSONColumn, nullable=False))
    """Per subset (and `overall`) and metric: `{"value", "hits", "n", "lo", "hi"}`, the
    interval a 95 % Wilson score interval."""
    records: list[dict[str, Any]] = Field(sa_column=Column(JSONColumn, nullable=False))
    """Per record: id, fingerprint (id, gold label, step count), subset, the answer and
    whether each metric got it right."""
    definition: dict[str, Any] = Field(sa_column=Column(JSONColumn, nullable=False))
    """The entry as the suite defined it (dataset spec and selection, attributor and its
    configuration, settings, model settings without keys)."""
    verdict: str = Field(sa_column=Column(String(16), nullable=False))
    """A `BenchVerdict` value."""
    accepted: bool = Field(sa_column=Column(Boolean, nullable=False))
    """Whether later entries compare with this one (not a regression, or accepted by hand)."""
    baseline_id: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    """The accepted entry the gate compared with (null for the first)."""
    gate: dict[str, Any] | None = Field(default=None, sa_column=Column(JSONColumn, nullable=True))
    """The comparison: per metric the records that went each way and the test's p-value."""
