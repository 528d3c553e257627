"""What the query API answers, as frozen dataclasses: runs, trajectories, attributions,
jobs, labels and statistics, and the statuses a run or job can have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "FINISHED_JOB_STATUSES",
    "FINISHED_STATUSES",
    "OUTCOMES",
    "RUN_STATUSES",
    "Attribution",
    "AttributionJob",
    "AttributorAccuracy",
    "BlameBucket",
    "Candidate",
    "IngestStats",
    "Label",
    "PredictionSet",
    "RunDetail",
    "RunSummary",
    "Stats",
    "Step",
    "Trajectory",
]

RUN_STATUSES = ("running", "complete", "failed", "attributed")
"""Every status a run can have, in lifecycle order."""
FINISHED_STATUSES = frozenset({"complete", "failed", "attributed"})
"""Statuses of runs the sidecar has finished assembling (what `wait_for_run` waits for)."""
FINISHED_JOB_STATUSES = frozenset({"done", "failed"})
"""Statuses of attribution jobs that will not change any more."""
OUTCOMES = ("success", "failure")
"""Verdicts `post_outcome` accepts."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """A ranked suspect of an attribution."""

    step: int
    agent: str
    score: float
    evidence: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PredictionSet:
    """Steps [lo, hi] that contain the decisive step with probability at least 1 - alpha."""

    lo: int
    hi: int
    alpha: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Attribution:
    """One attributor's answer: who failed (`agent`), when (`step`, 0-based) and why."""

    method: str
    status: str = "ok"
    """`ok`, or `failed` when the attributor could not answer (`reason` says why)."""
    agent: str | None = None
    step: int | None = None
    reason: str = ""
    confidence: float | None = None
    """How sure the method is, in [0, 1]; None when it gives no figure."""
    candidates: tuple[Candidate, ...] = ()
    prediction_set: PredictionSet | None = None
    error_category: str | None = None
    """The kind of mistake, when the method names one."""
    suggested_fix: str | None = None
    failure_reason: str | None = None
    """Why the attributor could not answer (status `failed`)."""
    used_ground_truth: bool = False
    model: str | None = None
    """The LLM the method asked, if any."""
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    details: Mapping[str, Any] = field(default_factory=dict)
    """Method-specific extras."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One position of a trajectory, as the sidecar assembled it."""

    index: int
    agent: str
    kind: str = "message"
    """message, llm, tool, handoff, human or system."""
    content: str = ""
    role: str | None = None
    tool_name: str | None = None
    tool_arguments: str | None = None
    tool_result: str | None = None
    span_id: str | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    status: str = "unset"
    """unset, ok or error."""
    error: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Trajectory:
    """A run's task, ordered steps and what is known about its outcome."""

    run_id: str
    task: str = ""
    ground_truth: str | None = None
    final_answer: str | None = None
    steps: tuple[Step, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def agents(self) -> tuple[str, ...]:
        """Distinct agents in order of first appearance."""
        return tuple(dict.fromkeys(step.agent for step in self.steps))


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """A run as listed by `runs()`."""

    id: str
    project: str
    status: str
    """running, complete, failed or attributed."""
    agents: tuple[str, ...] = ()
    n_steps: int = 0
    n_spans: int = 0
    outcome: str | None = None
    unfinished: bool = False
    """Failed because its root span never arrived (crashed, killed or hung)."""
    started_at: float | None = None
    """Unix seconds of the earliest span start."""
    ended_at: float | None = None
    attributions: tuple[Attribution, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDetail(RunSummary):
    """A run with its assembled trajectory."""

    trajectory: Trajectory


@dataclass(frozen=True, slots=True, kw_only=True)
class AttributionJob:
    """A queued (re-)attribution; `attribution` is set once it is `done`."""

    id: int
    run_id: str | None
    attributor: str
    status: str
    """queued, running, done or failed."""
    attempts: int = 0
    max_attempts: int = 0
    last_error: str | None = None
    attribution: Attribution | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_JOB_STATUSES


@dataclass(frozen=True, slots=True, kw_only=True)
class Label:
    """A human's verdict on a run: the agent and 0-based step that caused the failure."""

    id: int
    run_id: str
    agent: str
    step: int
    reason: str | None = None
    author: str | None = None
    created_at: float | None = None
    """Unix seconds."""
    mode: str | None = None
    """The error mode's code (e.g. `R.3`), when the label names one."""
    source: str = "human"
    """`human`, or `injected` for the exact label of a controlled failure injection."""
    details: dict[str, Any] | None = None
    """An injected label's attempt (original and injected text, model call)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BlameBucket:
    """Failed runs blamed on each agent within one time bucket."""

    start: float
    """Unix seconds of the bucket's start."""
    counts: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class AttributorAccuracy:
    """How often an attributor agreed with human labels."""

    method: str
    labelled_runs: int
    agent_accuracy: float | None = None
    step_accuracy: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Stats:
    """Runs by status, blame by agent (in total and over time), attributor accuracy."""

    runs_by_status: Mapping[str, int] = field(default_factory=dict)
    jobs_by_status: Mapping[str, int] = field(default_factory=dict)
    blame_by_agent: Mapping[str, int] = field(default_factory=dict)
    blame_over_time: tuple[BlameBucket, ...] = ()
    bucket_seconds: int = 0
    accuracy: tuple[AttributorAccuracy, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestStats:
    """What the sidecar's OTLP ingest has received, stored and rejected since it started."""

    spans_stored: int
    spans_received: int
    spans_acknowledged: int
    queued_spans: int
    spans_rejected: Mapping[str, int] = field(default_factory=dict)
    requests_rejected: Mapping[str, int] = field(default_factory=dict)
    write_errors: int = 0
    batches_written: int = 0
