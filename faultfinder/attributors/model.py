"""The domain core: a run's `Trajectory` of `Step`s and the `Attribution` that blames one of them.

Steps are indexed from 0 by their position in the trajectory; those indices are the
user's truth and survive every transport (a Who&When record replayed through OTLP
comes back with the dataset's indices).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from faultfinder.attributors.failure_modes import answer_mode


class StepKind(StrEnum):
    """What a step is: who produced it and in what capacity."""

    MESSAGE = "message"
    """An agent's turn in the conversation (text, plan, code, answer)."""
    LLM = "llm"
    """A raw model call made by an agent."""
    TOOL = "tool"
    """Output of a tool or terminal that an agent invoked."""
    HANDOFF = "handoff"
    """An agent passing control or an instruction to another agent."""
    HUMAN = "human"
    """A human or user turn (the task, a reply)."""
    SYSTEM = "system"
    """A system prompt or framework bookkeeping."""


class StepStatus(StrEnum):
    UNSET = "unset"
    OK = "ok"
    ERROR = "error"


class Step(BaseModel):
    """One position in a trajectory."""

    model_config = ConfigDict(frozen=True)

    index: int = Field(ge=0, description="0-based position in the trajectory.")
    agent: str = Field(description="The agent (or actor such as a tool or human) of this step.")
    kind: StepKind = StepKind.MESSAGE
    content: str = ""
    role: str | None = Field(
        default=None, description="The source's own role label, e.g. 'Orchestrator (thought)'."
    )
    tool_name: str | None = None
    tool_arguments: str | None = None
    tool_result: str | None = None
    span_id: str | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    status: StepStatus = StepStatus.UNSET
    error: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class Trajectory(BaseModel):
    """A run: the task, the ordered steps and what is known about its outcome."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    task: str = ""
    ground_truth: str | None = None
    final_answer: str | None = None
    steps: tuple[Step, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _indices_are_positions(self) -> Trajectory:
        for position, step in enumerate(self.steps):
            if step.index != position:
                raise ValueError(
                    f"steps[{position}].index is {step.index}; step indices must be 0..n-1 in order"
                )
        return self

    @property
    def agents(self) -> tuple[str, ...]:
        """Distinct agents in order of first appearance."""
        return tuple(dict.fromkeys(step.agent for step in self.steps))

    @property
    def roster(self) -> tuple[str, ...]:
        """The system's agents: `metadata["roster"]` when the framework's team is known
        (it may include agents that never spoke in this run), else the agents seen."""
        return self.declared_roster or self.agents

    @property
    def declared_roster(self) -> tuple[str, ...]:
        """`metadata["roster"]` when the trace declares its team (a non-empty list of
        names), else ()."""
        declared = self.metadata.get("roster")
        if (
            isinstance(declared, list | tuple)
            and declared
            and all(isinstance(name, str) for name in declared)
        ):
            return tuple(dict.fromkeys(declared))
        return ()

    def __len__(self) -> int:
        return len(self.steps)


class Candidate(BaseModel):
    """A ranked suspect: a step, its agent and how strongly the method suspects it."""

    model_config = ConfigDict(frozen=True)

    step: int = Field(ge=0)
    agent: str
    score: float
    evidence: str = ""


class PredictionSet(BaseModel):
    """A contiguous range of steps [lo, hi] meant to contain the decisive step w.p. >= 1-alpha."""

    model_config = ConfigDict(frozen=True)

    lo: int = Field(ge=0)
    hi: int = Field(ge=0)
    alpha: float = Field(gt=0, lt=1)

    @model_validator(mode="after")
    def _ordered(self) -> PredictionSet:
        if self.hi < self.lo:
            raise ValueError(f"prediction set hi ({self.hi}) is below lo ({self.lo})")
        return self


class AttributionStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"


class Attribution(BaseModel):
    """Who failed, when and why — or, with status `failed`, why no answer could be given."""

    model_config = ConfigDict(frozen=True)

    method: str
    status: AttributionStatus = AttributionStatus.OK
    agent: str | None = None
    step: int | None = Field(default=None, ge=0)
    reason: str = ""
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    """How sure the method is, in [0, 1], when it measures that; None when it does not (an
    LLM method whose model was not asked for a figure), never a made-up 0."""
    candidates: tuple[Candidate, ...] = ()
    prediction_set: PredictionSet | None = None
    error_category: str | None = None
    suggested_fix: str | None = None
    used_ground_truth: bool = False
    llm_calls: int = Field(default=0, ge=0)
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    latency_s: float = Field(default=0.0, ge=0.0)
    model: str | None = None
    failure_reason: str | None = None
    basis: str | None = Field(
        default=None,
        description=(
            "What the answer rests on: the family of the evidence behind the blamed step"
            " (e.g. 'tool-error', 'unsupported-argument', 'unsupported-figure',"
            " 'user-withheld'), or 'guess' when no step shows any; None when the method"
            " does not say (LLM methods, attributions stored before it was recorded)."
        ),
    )
    mode: str | None = Field(
        default=None,
        description=(
            "The failure mode of the blamed step, a Who&When Pro taxonomy code (e.g. 'R.1'"
            " hallucination, 'A.1' tool arguments, 'C.2' communication failure), derived from"
            " the evidence when the method names none; None for a guess or a failed answer."
        ),
    )
    details: dict[str, Any] = Field(
        default_factory=dict, description="Method-specific extras (parse path, dropped context)."
    )

    @model_validator(mode="before")
    @classmethod
    def _mode_from_evidence(cls, data: Any) -> Any:
        """An ok answer that names no mode takes the one its evidence shows (answers
        stored before modes were recorded too, as they are read)."""
        if not isinstance(data, dict) or data.get("mode") is not None:
            return data
        mode = answer_mode(data)
        return data if mode is None else {**data, "mode": mode}

    @field_validator("reason")
    @classmethod
    def _trim_reason(cls, value: str) -> str:
        return value.strip()

    @model_validator(mode="after")
    def _ok_has_answer(self) -> Attribution:
        if self.status is AttributionStatus.OK and (self.agent is None or self.step is None):
            raise ValueError("an ok attribution names both an agent and a step")
        if self.status is AttributionStatus.FAILED and not self.failure_reason:
            raise ValueError("a failed attribution carries a failure_reason")
        return self

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @classmethod
    def failed(cls, method: str, reason: str, **fields: Any) -> Attribution:
        """An attribution that could not be made, with the reason why."""
        return cls(method=method, status=AttributionStatus.FAILED, failure_reason=reason, **fields)


def validate_against(attribution: Attribution, trajectory: Trajectory) -> str | None:
    """Why `attribution` does not fit `trajectory` (step out of range, unknown agent), or None."""
    if attribution.status is AttributionStatus.FAILED:
        return None
    assert attribution.step is not None and attribution.agent is not None
    if not 0 <= attribution.step < len(trajectory):
        return f"step {attribution.step} is outside 0..{len(trajectory) - 1}"
    known = {normalise_agent(a) for a in (*trajectory.agents, *trajectory.roster)}
    if normalise_agent(attribution.agent) not in known:
        return f"agent {attribution.agent!r} is not one of {list(trajectory.agents)}"
    return None


def normalise_agent(name: str) -> str:
    """Agent names compare case-insensitively, ignoring surrounding space and '-'/'_'/' ' choice."""
    return "".join(ch for ch in name.strip().casefold() if ch not in " _-")
