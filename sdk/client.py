"""Clients for the sidecar's query API: list runs, read a run's trajectory and attributions,
wait for a verdict, post outcomes and labels, re-attribute, read statistics.

`Client` is synchronous, `AsyncClient` the same surface for asyncio. Results are frozen
dataclasses; every failure is a `faultfinder.sdk.errors.FaultfinderError`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from http import HTTPStatus
from types import TracebackType
from typing import Any, Generic, Self, TypeVar
from urllib.parse import quote

import httpx

from faultfinder import __version__
from faultfinder.sdk.errors import (
    APIError,
    AuthError,
    NotFoundError,
    ResponseError,
    ServerBusyError,
    TransportError,
    ValidationError,
    WaitTimeoutError,
)
from faultfinder.sdk.tracing import API_KEY_VARIABLE, ENDPOINT_VARIABLE

__all__ = [
    "DEFAULT_BASE_URL",
    "FINISHED_JOB_STATUSES",
    "FINISHED_STATUSES",
    "OUTCOMES",
    "RUN_STATUSES",
    "AsyncClient",
    "Attribution",
    "AttributionJob",
    "AttributorAccuracy",
    "BlameBucket",
    "Candidate",
    "Client",
    "IngestStats",
    "Label",
    "PredictionSet",
    "RunDetail",
    "RunSummary",
    "Stats",
    "Step",
    "Trajectory",
]

DEFAULT_BASE_URL = "http://127.0.0.1:4318"
"""The local sidecar (it serves the API on its OTLP/HTTP port)."""
RUN_STATUSES = ("running", "complete", "failed", "attributed")
"""Every status a run can have, in lifecycle order."""
FINISHED_STATUSES = frozenset({"complete", "failed", "attributed"})
"""Statuses of runs the sidecar has finished assembling (what `wait_for_run` waits for)."""
FINISHED_JOB_STATUSES = frozenset({"done", "failed"})
"""Statuses of attribution jobs that will not change any more."""
OUTCOMES = ("success", "failure")
"""Verdicts `post_outcome` accepts."""
MAX_PAGE_SIZE = 500
"""Most runs the API returns per page."""


# --- results --------------------------------------------------------------------------------


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
    confidence: float = 0.0
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


# --- reading responses ---------------------------------------------------------------------


class _Fields:
    """Typed access to one JSON object of a response; mistakes name the field."""

    def __init__(self, value: object, where: str) -> None:
        if not isinstance(value, dict):
            raise ResponseError(f"{where}: expected a JSON object, got {_json_type(value)}")
        self.data: dict[str, Any] = value
        self.where = where

    def _missing(self, key: str) -> ResponseError:
        return ResponseError(f"{self.where}.{key}: missing")

    def _wrong(self, key: str, expected: str) -> ResponseError:
        got = _json_type(self.data[key])
        return ResponseError(f"{self.where}.{key}: expected {expected}, got {got}")

    def text(self, key: str, default: str | None = None) -> str:
        value = self.data.get(key, default)
        if value is None:
            raise self._missing(key)
        if not isinstance(value, str):
            raise self._wrong(key, "a string")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._wrong(key, "true or false")
        return value

    def optional_text(self, key: str) -> str | None:
        return None if self.data.get(key) is None else self.text(key)

    def integer(self, key: str, default: int | None = None) -> int:
        value = self.data.get(key, default)
        if value is None:
            raise self._missing(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(key, "an integer")
        return value

    def optional_integer(self, key: str) -> int | None:
        return None if self.data.get(key) is None else self.integer(key)

    def number(self, key: str, default: float | None = None) -> float:
        value = self.data.get(key, default)
        if value is None:
            raise self._missing(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._wrong(key, "a number")
        return float(value)

    def optional_number(self, key: str) -> float | None:
        return None if self.data.get(key) is None else self.number(key)

    def timestamp(self, key: str) -> datetime | None:
        if self.data.get(key) is None:
            return None
        text = self.text(key)
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            raise ResponseError(f"{self.where}.{key}: {text!r} is not an ISO 8601 time") from None

    def items(self, key: str) -> list[tuple[str, Any]]:
        """The elements of a list field with their paths (an absent field is empty)."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._wrong(key, "a list")
        return [(f"{self.where}.{key}[{n}]", item) for n, item in enumerate(value)]

    def texts(self, key: str) -> tuple[str, ...]:
        out = []
        for where, item in self.items(key):
            if not isinstance(item, str):
                raise ResponseError(f"{where}: expected a string, got {_json_type(item)}")
            out.append(item)
        return tuple(out)

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.data.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self._wrong(key, "an object")
        return value

    def counts(self, key: str) -> dict[str, int]:
        counts = self.mapping(key)
        for name, count in counts.items():
            if isinstance(count, bool) or not isinstance(count, int):
                raise ResponseError(
                    f"{self.where}.{key}.{name}: expected an integer, got {_json_type(count)}"
                )
        return counts


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"the number {value}"
    return names.get(type(value), type(value).__name__)


def _candidate(value: object, where: str) -> Candidate:
    f = _Fields(value, where)
    return Candidate(
        step=f.integer("step"),
        agent=f.text("agent"),
        score=f.number("score"),
        evidence=f.text("evidence", ""),
    )


def _attribution(value: object, where: str) -> Attribution:
    f = _Fields(value, where)
    prediction_set = None
    if f.data.get("prediction_set") is not None:
        p = _Fields(f.data["prediction_set"], f"{where}.prediction_set")
        prediction_set = PredictionSet(
            lo=p.integer("lo"), hi=p.integer("hi"), alpha=p.number("alpha")
        )
    return Attribution(
        method=f.text("method"),
        status=f.text("status", "ok"),
        agent=f.optional_text("agent"),
        step=f.optional_integer("step"),
        reason=f.text("reason", ""),
        confidence=f.number("confidence", 0.0),
        candidates=tuple(_candidate(item, path) for path, item in f.items("candidates")),
        prediction_set=prediction_set,
        error_category=f.optional_text("error_category"),
        suggested_fix=f.optional_text("suggested_fix"),
        failure_reason=f.optional_text("failure_reason"),
        used_ground_truth=f.boolean("used_ground_truth", False),
        model=f.optional_text("model"),
        llm_calls=f.integer("llm_calls", 0),
        prompt_tokens=f.integer("prompt_tokens", 0),
        completion_tokens=f.integer("completion_tokens", 0),
        latency_s=f.number("latency_s", 0.0),
        details=f.mapping("details"),
    )


def _step(value: object, where: str) -> Step:
    f = _Fields(value, where)
    return Step(
        index=f.integer("index"),
        agent=f.text("agent"),
        kind=f.text("kind", "message"),
        content=f.text("content", ""),
        role=f.optional_text("role"),
        tool_name=f.optional_text("tool_name"),
        tool_arguments=f.optional_text("tool_arguments"),
        tool_result=f.optional_text("tool_result"),
        span_id=f.optional_text("span_id"),
        start_time=f.timestamp("start_time"),
        end_time=f.timestamp("end_time"),
        status=f.text("status", "unset"),
        error=f.optional_text("error"),
        metadata=f.mapping("metadata"),
    )


def _trajectory(value: object, where: str) -> Trajectory:
    f = _Fields(value, where)
    return Trajectory(
        run_id=f.text("run_id"),
        task=f.text("task", ""),
        ground_truth=f.optional_text("ground_truth"),
        final_answer=f.optional_text("final_answer"),
        steps=tuple(_step(item, path) for path, item in f.items("steps")),
        metadata=f.mapping("metadata"),
    )


def _summary_fields(f: _Fields) -> dict[str, Any]:
    return {
        "id": f.text("id"),
        "project": f.text("project"),
        "status": f.text("status"),
        "agents": f.texts("agents"),
        "n_steps": f.integer("n_steps", 0),
        "n_spans": f.integer("n_spans", 0),
        "outcome": f.optional_text("outcome"),
        "started_at": f.optional_number("started_at"),
        "ended_at": f.optional_number("ended_at"),
        "attributions": tuple(_attribution(item, path) for path, item in f.items("attributions")),
    }


def _run_summary(value: object, where: str = "run") -> RunSummary:
    return RunSummary(**_summary_fields(_Fields(value, where)))


def _run_detail(value: object, where: str = "run") -> RunDetail:
    f = _Fields(value, where)
    if f.data.get("trajectory") is None:
        raise ResponseError(f"{where}.trajectory: missing")
    trajectory = _trajectory(f.data["trajectory"], f"{where}.trajectory")
    return RunDetail(**_summary_fields(f), trajectory=trajectory)


def _run_page(value: object) -> tuple[list[RunSummary], str | None]:
    f = _Fields(value, "runs page")
    items = [_run_summary(item, path) for path, item in f.items("items")]
    return items, f.optional_text("next_cursor")


def _job(value: object, where: str = "job") -> AttributionJob:
    f = _Fields(value, where)
    attribution = f.data.get("attribution")
    return AttributionJob(
        id=f.integer("id"),
        run_id=f.optional_text("run_id"),
        attributor=f.text("attributor"),
        status=f.text("status"),
        attempts=f.integer("attempts", 0),
        max_attempts=f.integer("max_attempts", 0),
        last_error=f.optional_text("last_error"),
        attribution=None
        if attribution is None
        else _attribution(attribution, f"{where}.attribution"),
    )


def _jobs(value: object) -> tuple[AttributionJob, ...]:
    return tuple(_job(item, path) for path, item in _list(value, "jobs"))


def _label(value: object, where: str = "label") -> Label:
    f = _Fields(value, where)
    return Label(
        id=f.integer("id"),
        run_id=f.text("run_id"),
        agent=f.text("agent"),
        step=f.integer("step"),
        reason=f.optional_text("reason"),
        author=f.optional_text("author"),
        created_at=f.optional_number("created_at"),
    )


def _labels(value: object) -> tuple[Label, ...]:
    return tuple(_label(item, path) for path, item in _list(value, "labels"))


def _list(value: object, where: str) -> list[tuple[str, Any]]:
    if not isinstance(value, list):
        raise ResponseError(f"{where}: expected a JSON list, got {_json_type(value)}")
    return [(f"{where}[{n}]", item) for n, item in enumerate(value)]


def _stats(value: object) -> Stats:
    f = _Fields(value, "stats")
    buckets = []
    for path, item in f.items("blame_over_time"):
        bucket = _Fields(item, path)
        buckets.append(BlameBucket(start=bucket.number("start"), counts=bucket.counts("counts")))
    accuracy = []
    for path, item in f.items("accuracy"):
        a = _Fields(item, path)
        accuracy.append(
            AttributorAccuracy(
                method=a.text("method"),
                labelled_runs=a.integer("labelled_runs", 0),
                agent_accuracy=a.optional_number("agent_accuracy"),
                step_accuracy=a.optional_number("step_accuracy"),
            )
        )
    return Stats(
        runs_by_status=f.counts("runs_by_status"),
        jobs_by_status=f.counts("jobs_by_status"),
        blame_by_agent=f.counts("blame_by_agent"),
        blame_over_time=tuple(buckets),
        bucket_seconds=f.integer("bucket_seconds", 0),
        accuracy=tuple(accuracy),
    )


def _ingest_stats(value: object) -> IngestStats:
    f = _Fields(value, "ingest stats")
    return IngestStats(
        spans_stored=f.integer("spans_stored"),
        spans_received=f.integer("spans_received"),
        spans_acknowledged=f.integer("spans_acknowledged"),
        queued_spans=f.integer("queued_spans"),
        spans_rejected=f.counts("spans_rejected"),
        requests_rejected=f.counts("requests_rejected"),
        write_errors=f.integer("write_errors", 0),
        batches_written=f.integer("batches_written", 0),
    )


# --- requests ------------------------------------------------------------------------------

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Call(Generic[T]):
    """One API request and how to read its answer; sent by either client."""

    method: str
    path: str
    read: Callable[[Any], T]
    params: Mapping[str, str | int | float] | None = None
    body: Any = None


def _run_path(run_id: str, suffix: str = "") -> str:
    if not run_id:
        raise ValueError("run_id must not be empty")
    return f"/api/runs/{quote(run_id, safe='')}{suffix}"


def _base_url(base_url: str | None) -> str:
    url = base_url or os.environ.get(ENDPOINT_VARIABLE, "").strip() or DEFAULT_BASE_URL
    if not url.startswith(("http://", "https://")):
        source = "base_url" if base_url else ENDPOINT_VARIABLE
        raise ValueError(f"{source}: {url!r} is not an http(s) URL such as {DEFAULT_BASE_URL}")
    return url.rstrip("/")


def _headers(api_key: str | None, headers: Mapping[str, str] | None) -> dict[str, str]:
    merged = {"user-agent": f"faultfinder-sdk/{__version__}", "accept": "application/json"}
    api_key = api_key or os.environ.get(API_KEY_VARIABLE, "").strip() or None
    if api_key:
        merged["authorization"] = f"Bearer {api_key}"
    merged.update(headers or {})
    return merged


@dataclass(frozen=True, slots=True)
class _Listing:
    """The filters of a `runs()` listing, checked before the first request."""

    status: str | None
    project: str | None
    agent: str | None
    since: float | None
    until: float | None
    limit: int | None
    page_size: int

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in RUN_STATUSES:
            raise ValueError(
                f"status must be one of {', '.join(RUN_STATUSES)} (got {self.status!r})"
            )
        if not 1 <= self.page_size <= MAX_PAGE_SIZE:
            raise ValueError(
                f"page_size must be between 1 and {MAX_PAGE_SIZE} (got {self.page_size})"
            )
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"limit must not be negative (got {self.limit})")

    def page(self, yielded: int, cursor: str | None) -> _Call[tuple[list[RunSummary], str | None]]:
        """The request for the next page: a full page, or only what is left of `limit`."""
        size = self.page_size
        if self.limit is not None:
            size = max(1, min(size, self.limit - yielded))
        params: dict[str, str | int | float] = {"limit": size}
        optional = {
            "status": self.status,
            "project": self.project,
            "agent": self.agent,
            "since": self.since,
            "until": self.until,
            "cursor": cursor,
        }
        params.update({key: value for key, value in optional.items() if value is not None})
        return _Call("GET", "/api/runs", _run_page, params=params)

    def wanted(self, items: list[RunSummary], yielded: int) -> list[RunSummary]:
        return items if self.limit is None else items[: max(0, self.limit - yielded)]

    def done(self, yielded: int) -> bool:
        return self.limit is not None and yielded >= self.limit


def _wanted_statuses(status: str | Iterable[str], allowed: Iterable[str]) -> frozenset[str]:
    allowed = tuple(allowed)
    wanted = frozenset({status} if isinstance(status, str) else status)
    unknown = sorted(wanted - set(allowed))
    if not wanted or unknown:
        raise ValueError(
            f"status must be among {', '.join(allowed)} (got {', '.join(unknown) or 'none'})"
        )
    return wanted


def _outcome_call(
    run_id: str,
    outcome: str,
    reason: str | None,
    ground_truth: str | None,
    final_answer: str | None,
) -> _Call[RunSummary]:
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)} (got {outcome!r})")
    body = {"outcome": outcome}
    optional = {"reason": reason, "ground_truth": ground_truth, "final_answer": final_answer}
    body.update({key: value for key, value in optional.items() if value is not None})
    return _Call("POST", _run_path(run_id, "/outcome"), _run_summary, body=body)


def _reattribute_call(run_id: str, attributor: str) -> _Call[AttributionJob]:
    if not attributor:
        raise ValueError("attributor must not be empty")
    body = {"attributor": attributor}
    return _Call("POST", _run_path(run_id, "/attributions"), _job, body=body)


def _label_call(
    run_id: str, agent: str, step: int, reason: str | None, author: str | None
) -> _Call[Label]:
    if not agent:
        raise ValueError("agent must not be empty")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a 0-based step index (got {step!r})")
    body: dict[str, Any] = {"agent": agent, "step": step}
    if reason is not None:
        body["reason"] = reason
    if author is not None:
        body["author"] = author
    return _Call("POST", _run_path(run_id, "/labels"), _label, body=body)


def _stats_call(window: float | None, bucket: int | None) -> _Call[Stats]:
    params: dict[str, str | int | float] = {}
    if window is not None:
        params["window"] = window
    if bucket is not None:
        params["bucket"] = bucket
    return _Call("GET", "/api/stats", _stats, params=params)


def _error_detail(response: httpx.Response) -> str:
    """The server's explanation: the informative parts of a Problem Details body."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:500] or response.reason_phrase
    if not isinstance(body, dict):
        return json.dumps(body)[:500]
    try:
        phrase = HTTPStatus(response.status_code).phrase
    except ValueError:
        phrase = response.reason_phrase
    texts = [str(body[key]) for key in ("title", "detail") if body.get(key)]
    # Litestar puts its message in `title` or `detail` and the bare status phrase in the other.
    informative = [text for text in dict.fromkeys(texts) if text.lower() != phrase.lower()]
    detail = ": ".join(informative) or (texts[0] if texts else phrase)
    problems = []
    extra = body.get("extra")
    if isinstance(extra, list):
        for item in extra:
            if isinstance(item, dict) and item.get("message"):
                key = item.get("key")
                problems.append(f"{key}: {item['message']}" if key else str(item["message"]))
    return f"{detail} ({'; '.join(problems)})" if problems else detail


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers.get("retry-after", ""))
    except ValueError:
        return None


def _checked(response: httpx.Response) -> Any:
    """The decoded JSON body of a 2xx response (None when empty); errors raised by status."""
    method, url = response.request.method, str(response.request.url)
    status = response.status_code
    if not response.is_success:
        detail = _error_detail(response)
        if status in (401, 403):
            raise AuthError(status, detail, method=method, url=url)
        if status == 404:
            raise NotFoundError(status, detail, method=method, url=url)
        if status in (400, 409, 422):
            raise ValidationError(status, detail, method=method, url=url)
        if status in (429, 503):
            raise ServerBusyError(
                status, detail, method=method, url=url, retry_after=_retry_after(response)
            )
        raise APIError(status, detail, method=method, url=url)
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        raise ResponseError(
            f"{method} {url} answered {status} with a body that is not JSON"
        ) from None


# --- clients --------------------------------------------------------------------------------


class Client:
    """Synchronous client of the sidecar's query API.

    `base_url` defaults to `$FAULTFINDER_ENDPOINT`, else the local sidecar; `api_key`
    (default `$FAULTFINDER_API_KEY`) is sent as `Authorization: Bearer KEY`. Use as a
    context manager, or call `close()`. `transport` replaces the network (e.g.
    `httpx.MockTransport` in tests).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = _base_url(base_url)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=_headers(api_key, headers),
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: _Call[T]) -> T:
        try:
            response = self._http.request(
                call.method, call.path, params=call.params, json=call.body
            )
        except httpx.TransportError as exc:
            raise TransportError(
                f"{call.method} {self.base_url}{call.path}: {type(exc).__name__}: {exc}"
            ) from exc
        return call.read(_checked(response))

    def runs(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        agent: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = None,
        page_size: int = 100,
    ) -> Iterator[RunSummary]:
        """Runs, newest first, fetched page after page; at most `limit` when given.

        `agent` keeps runs an agent took part in; `since`/`until` are Unix seconds.
        """
        listing = _Listing(status, project, agent, since, until, limit, page_size)
        return self._pages(listing)

    def _pages(self, listing: _Listing) -> Iterator[RunSummary]:
        yielded, cursor = 0, None
        while not listing.done(yielded):
            items, cursor = self._send(listing.page(yielded, cursor))
            for item in listing.wanted(items, yielded):
                yield item
                yielded += 1
            if cursor is None or not items:
                return

    def run(self, run_id: str) -> RunDetail:
        """One run with its trajectory and attributions; `NotFoundError` when unknown."""
        return self._send(_Call("GET", _run_path(run_id), _run_detail))

    def attributions(self, run_id: str) -> tuple[Attribution, ...]:
        """Every attribution made for the run so far (empty until one is made)."""
        return self.run(run_id).attributions

    def wait_for_run(
        self,
        run_id: str,
        status: str | Iterable[str] = FINISHED_STATUSES,
        *,
        timeout: float = 60.0,
        poll_interval: float = 0.5,
    ) -> RunDetail:
        """Poll until the run has one of `status` (default: any finished status).

        A run the sidecar has not seen yet (its spans are still on their way) is waited
        for too. Raises `WaitTimeoutError` after `timeout` seconds.
        """
        wanted = _wanted_statuses(status, RUN_STATUSES)
        deadline = time.monotonic() + timeout
        last: str | None = None
        while True:
            try:
                detail = self.run(run_id)
            except NotFoundError:
                pass
            else:
                if detail.status in wanted:
                    return detail
                last = detail.status
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeoutError(f"run {run_id!r}", wanted, last, timeout)
            time.sleep(min(poll_interval, remaining))

    def post_outcome(
        self,
        run_id: str,
        outcome: str,
        *,
        reason: str | None = None,
        ground_truth: str | None = None,
        final_answer: str | None = None,
    ) -> RunSummary:
        """Grade a run after the fact: `success` or `failure` (a failure gets attributed)."""
        return self._send(_outcome_call(run_id, outcome, reason, ground_truth, final_answer))

    def reattribute(self, run_id: str, attributor: str) -> AttributionJob:
        """Queue an attribution of the run by the named attributor; see `wait_for_job`."""
        return self._send(_reattribute_call(run_id, attributor))

    def job(self, job_id: int) -> AttributionJob:
        """One attribution job."""
        return self._send(_Call("GET", f"/api/jobs/{int(job_id)}", _job))

    def jobs(self, run_id: str) -> tuple[AttributionJob, ...]:
        """Every attribution job of the run."""
        return self._send(_Call("GET", _run_path(run_id, "/jobs"), _jobs))

    def wait_for_job(
        self, job_id: int, *, timeout: float = 60.0, poll_interval: float = 0.5
    ) -> AttributionJob:
        """Poll until the job is done or failed; `WaitTimeoutError` after `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job.finished:
                return job
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeoutError(f"job {job_id}", FINISHED_JOB_STATUSES, job.status, timeout)
            time.sleep(min(poll_interval, remaining))

    def label(
        self,
        run_id: str,
        agent: str,
        step: int,
        reason: str | None = None,
        *,
        author: str | None = None,
    ) -> Label:
        """Record the true answer for a failed run: the responsible `agent`, 0-based `step`."""
        return self._send(_label_call(run_id, agent, step, reason, author))

    def labels(self, run_id: str) -> tuple[Label, ...]:
        """The human labels of the run."""
        return self._send(_Call("GET", _run_path(run_id, "/labels"), _labels))

    def stats(self, *, window: float | None = None, bucket: int | None = None) -> Stats:
        """Runs by status, blame by agent over the last `window` seconds in `bucket`-second
        buckets (the sidecar's defaults: a week, by hour), attributor accuracy."""
        return self._send(_stats_call(window, bucket))

    def ingest_stats(self) -> IngestStats:
        """Spans received, stored and rejected by the sidecar's OTLP ingest."""
        return self._send(_Call("GET", "/api/stats/ingest", _ingest_stats))


class AsyncClient:
    """`Client` for asyncio: the same methods, awaited (`runs()` is an async iterator)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = _base_url(base_url)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=_headers(api_key, headers),
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _Call[T]) -> T:
        try:
            response = await self._http.request(
                call.method, call.path, params=call.params, json=call.body
            )
        except httpx.TransportError as exc:
            raise TransportError(
                f"{call.method} {self.base_url}{call.path}: {type(exc).__name__}: {exc}"
            ) from exc
        return call.read(_checked(response))

    def runs(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        agent: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[RunSummary]:
        """Runs, newest first, fetched page after page (`async for`); at most `limit`."""
        listing = _Listing(status, project, agent, since, until, limit, page_size)
        return self._pages(listing)

    async def _pages(self, listing: _Listing) -> AsyncIterator[RunSummary]:
        yielded, cursor = 0, None
        while not listing.done(yielded):
            items, cursor = await self._send(listing.page(yielded, cursor))
            for item in listing.wanted(items, yielded):
                yield item
                yielded += 1
            if cursor is None or not items:
                return

    async def run(self, run_id: str) -> RunDetail:
        """One run with its trajectory and attributions; `NotFoundError` when unknown."""
        return await self._send(_Call("GET", _run_path(run_id), _run_detail))

    async def attributions(self, run_id: str) -> tuple[Attribution, ...]:
        """Every attribution made for the run so far (empty until one is made)."""
        return (await self.run(run_id)).attributions

    async def wait_for_run(
        self,
        run_id: str,
        status: str | Iterable[str] = FINISHED_STATUSES,
        *,
        timeout: float = 60.0,
        poll_interval: float = 0.5,
    ) -> RunDetail:
        """Poll until the run has one of `status` (default: any finished status).

        A run the sidecar has not seen yet is waited for too. Raises `WaitTimeoutError`
        after `timeout` seconds.
        """
        wanted = _wanted_statuses(status, RUN_STATUSES)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last: str | None = None
        while True:
            try:
                detail = await self.run(run_id)
            except NotFoundError:
                pass
            else:
                if detail.status in wanted:
                    return detail
                last = detail.status
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise WaitTimeoutError(f"run {run_id!r}", wanted, last, timeout)
            await asyncio.sleep(min(poll_interval, remaining))

    async def post_outcome(
        self,
        run_id: str,
        outcome: str,
        *,
        reason: str | None = None,
        ground_truth: str | None = None,
        final_answer: str | None = None,
    ) -> RunSummary:
        """Grade a run after the fact: `success` or `failure` (a failure gets attributed)."""
        return await self._send(_outcome_call(run_id, outcome, reason, ground_truth, final_answer))

    async def reattribute(self, run_id: str, attributor: str) -> AttributionJob:
        """Queue an attribution of the run by the named attributor; see `wait_for_job`."""
        return await self._send(_reattribute_call(run_id, attributor))

    async def job(self, job_id: int) -> AttributionJob:
        """One attribution job."""
        return await self._send(_Call("GET", f"/api/jobs/{int(job_id)}", _job))

    async def jobs(self, run_id: str) -> tuple[AttributionJob, ...]:
        """Every attribution job of the run."""
        return await self._send(_Call("GET", _run_path(run_id, "/jobs"), _jobs))

    async def wait_for_job(
        self, job_id: int, *, timeout: float = 60.0, poll_interval: float = 0.5
    ) -> AttributionJob:
        """Poll until the job is done or failed; `WaitTimeoutError` after `timeout` s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            job = await self.job(job_id)
            if job.finished:
                return job
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise WaitTimeoutError(f"job {job_id}", FINISHED_JOB_STATUSES, job.status, timeout)
            await asyncio.sleep(min(poll_interval, remaining))

    async def label(
        self,
        run_id: str,
        agent: str,
        step: int,
        reason: str | None = None,
        *,
        author: str | None = None,
    ) -> Label:
        """Record the true answer for a failed run: the responsible `agent`, 0-based `step`."""
        return await self._send(_label_call(run_id, agent, step, reason, author))

    async def labels(self, run_id: str) -> tuple[Label, ...]:
        """The human labels of the run."""
        return await self._send(_Call("GET", _run_path(run_id, "/labels"), _labels))

    async def stats(self, *, window: float | None = None, bucket: int | None = None) -> Stats:
        """Runs by status, blame by agent over time, attributor accuracy (see `Client`)."""
        return await self._send(_stats_call(window, bucket))

    async def ingest_stats(self) -> IngestStats:
        """Spans received, stored and rejected by the sidecar's OTLP ingest."""
        return await self._send(_Call("GET", "/api/stats/ingest", _ingest_stats))
