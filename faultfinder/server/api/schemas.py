"""Request and response bodies of the HTTP API (separate from the table models)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from faultfinder.attributors.model import Attribution, Trajectory


class RunSummary(BaseModel):
    id: str
    project: str
    status: str
    agents: list[str]
    n_steps: int
    n_spans: int
    outcome: str | None = None
    unfinished: bool = False
    """The run failed because its root span never arrived: its process crashed, was
    killed or hung before ending it (the `unfinished_after` setting)."""
    started_at: float | None = None
    """Unix seconds of the earliest span start."""
    ended_at: float | None = None
    attributions: list[Attribution] = []


class RunPage(BaseModel):
    items: list[RunSummary]
    next_cursor: str | None = None


class AlarmOut(BaseModel):
    """An early alarm: the step the online auditor suspected while the run was running."""

    run_id: str
    step: int
    agent: str
    score: float
    threshold: float
    steps_seen: int
    """Steps that had arrived when the alarm was raised."""
    created_at: float
    reason: str | None = None
    """Why the step: what set it apart from the steps seen so far."""


class RunDetail(RunSummary):
    trajectory: Trajectory
    """The run's steps from `steps_offset` (all of them unless a `steps_limit` was asked
    for); `n_steps` counts them all."""
    alarm: AlarmOut | None = None
    steps_offset: int = 0


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
    values_truncated: int = 0
    """Attribute values cut to the size cap (or replaced for nesting too deeply) at decode;
    their spans were kept."""
    decoder_pids: list[int] = []
    """The processes decoding OTLP/HTTP bodies beside this one (`serve --processes`)."""
    decoder_restarts: int = 0
    """Times the decoder processes were started again after one died."""


class Health(BaseModel):
    status: str
    details: dict[str, Any] = {}


class OutcomeIn(BaseModel):
    """A verdict on a run, e.g. from a grader: `failure` triggers attribution."""

    outcome: Literal["success", "failure"]
    reason: str | None = Field(default=None, max_length=20_000)
    ground_truth: str | None = Field(default=None, max_length=200_000)
    final_answer: str | None = Field(default=None, max_length=200_000)


class AttributeRunIn(BaseModel):
    """Re-run attribution of a stored run with a named attributor."""

    attributor: str = Field(min_length=1, max_length=200)


class JobOut(BaseModel):
    id: int
    run_id: str | None
    attributor: str
    status: str
    attempts: int
    max_attempts: int
    last_error: str | None = None
    attribution: Attribution | None = None


class AttributeIn(BaseModel):
    """An ad-hoc trajectory to attribute, synchronously (with a timeout) or as a job."""

    trajectory: Trajectory
    attributor: str = Field(default="learned", min_length=1, max_length=200)
    wait: bool = Field(
        default=True, description="Answer with the attribution (200) or at once with a job (202)."
    )
    timeout: float = Field(default=60.0, gt=0, le=3600)
    use_ground_truth: bool | None = None


LABEL_DETAILS_MAX_BYTES = 65_536
"""The largest `details` object a label may carry, as compact JSON."""


class LabelIn(BaseModel):
    """A verdict: which agent and which 0-based step caused the failure; a person's
    (`source` `human`) or a controlled failure injection's (`injected`)."""

    agent: str = Field(min_length=1, max_length=500)
    step: int = Field(ge=0)
    reason: str | None = Field(default=None, max_length=20_000)
    author: str | None = Field(default=None, max_length=200)
    mode: str | None = Field(
        default=None,
        max_length=50,
        description="The error mode's code (e.g. R.3 numerical error, A.1 tool arguments).",
    )
    source: Literal["human", "injected"] = "human"
    details: dict[str, Any] | None = Field(
        default=None,
        description="An injected label's attempt (original and injected text, model call);"
        f" at most {LABEL_DETAILS_MAX_BYTES} bytes as JSON.",
    )

    @field_validator("details")
    @classmethod
    def _bounded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
            if size > LABEL_DETAILS_MAX_BYTES:
                raise ValueError(f"is {size} bytes as JSON; at most {LABEL_DETAILS_MAX_BYTES}")
        return value


class LabelOut(LabelIn):
    id: int
    run_id: str
    created_at: float


class BlameBucket(BaseModel):
    start: float
    """Unix seconds of the bucket's start."""
    counts: dict[str, int]
    """Blamed agent → number of failed runs attributed to it in the bucket."""


class AttributorAccuracy(BaseModel):
    method: str
    labelled_runs: int
    agent_accuracy: float | None
    step_accuracy: float | None


class Stats(BaseModel):
    runs_by_status: dict[str, int]
    jobs_by_status: dict[str, int]
    blame_by_agent: dict[str, int]
    blame_over_time: list[BlameBucket]
    bucket_seconds: int
    accuracy: list[AttributorAccuracy]
    """Each attributor's live accuracy against human labels."""
