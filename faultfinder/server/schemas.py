"""Request and response bodies of the HTTP API (separate from the table models).

The run service (`server.runs`) answers in these models and the controllers in `server.api`
serve them, so they sit beside both rather than inside `api/`.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from faultfinder.attributors.auditor import Alarm
from faultfinder.attributors.model import Attribution, Trajectory


class RunSummary(BaseModel):
    id: str
    project: str
    status: str
    agents: list[str]
    n_steps: int
    n_spans: int
    outcome: str | None = None
    outcome_reason: str | None = None
    """Why the run failed (or succeeded), as its program or a grader said: `Run.fail(reason)`
    in the SDK, the posted outcome's `reason`."""
    task: str | None = None
    """What the run was asked to do, when a span or a posted outcome said."""
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


class RunDetail(RunSummary):
    trajectory: Trajectory
    """The run's steps from `steps_offset` (all of them unless a `steps_limit` was asked
    for); `n_steps` counts them all."""
    alarm: Alarm | None = None
    """The early alarm the online auditor raised while the run was running, if any."""
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
    blame_by_mode: dict[str, int] = {}
    """Failure mode (a Who&When Pro code, or `unknown`) → failed runs blamed with it."""
    modes_over_time: list[BlameBucket] = []
    """Failed runs per failure mode in each bucket (`counts` keyed by mode)."""


VERIFICATION_RESULTS = ("flipped", "still_failed", "diverged", "unmapped", "error")
"""How correcting one candidate step went: the run then succeeded (`flipped`), still
failed, its replayed prefix left the recording (`diverged`), no model call made the step
(`unmapped`), or no correction could be written (`error`)."""


class VerifiedStep(BaseModel):
    """One candidate step of a counterfactual verification and what correcting it did."""

    step: int = Field(ge=0)
    agent: str = Field(min_length=1, max_length=500)
    result: Literal["flipped", "still_failed", "diverged", "unmapped", "error"]
    replays: int = Field(default=0, ge=0, le=1000, description="Replays that reached the step.")
    flips: int = Field(default=0, ge=0, le=1000, description="Of those, replays that succeeded.")
    model_call: int | None = Field(default=None, ge=0)
    correction: str | None = Field(default=None, max_length=20_000)


class VerificationIn(BaseModel):
    """The outcome of `faultfinder verify`: candidate steps replayed with a corrected step
    each; stored as the run's attribution of method `counterfactual`."""

    candidates: list[VerifiedStep] = Field(min_length=1, max_length=200)
    search: Literal["all", "earliest"] = "all"
    model: str | None = Field(default=None, max_length=200)
