"""The query API's requests, built and checked once for both clients.

A `Call` is one request (method, path, query, body) and the reader of its answer;
`Client` sends it with httpx, `AsyncClient` with httpx's asyncio client. Arguments are
checked while a call is built, so a bad argument fails before anything is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from faultfinder.sdk.models import (
    OUTCOMES,
    RUN_STATUSES,
    AttributionJob,
    IngestStats,
    Label,
    RunDetail,
    RunSummary,
    Stats,
)
from faultfinder.sdk.responses import (
    read_ingest_stats,
    read_job,
    read_jobs,
    read_label,
    read_labels,
    read_run_detail,
    read_run_page,
    read_run_summary,
    read_stats,
)

MAX_PAGE_SIZE = 500
"""Most runs the API returns per page."""

T = TypeVar("T")

RunPage = tuple[list[RunSummary], str | None]
"""One page of `GET /api/runs`: its runs and the cursor of the next page (None: last)."""


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One API request and how to read its answer; sent by either client."""

    method: str
    path: str
    read: Callable[[Any], T]
    params: Mapping[str, str | int | float] | None = None
    body: Any = None


def run_path(run_id: str, suffix: str = "") -> str:
    if not run_id:
        raise ValueError("run_id must not be empty")
    return f"/api/runs/{quote(run_id, safe='')}{suffix}"


@dataclass(frozen=True, slots=True)
class Listing:
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

    def page(self, yielded: int, cursor: str | None) -> Call[RunPage]:
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
        return Call("GET", "/api/runs", read_run_page, params=params)

    def wanted(self, items: list[RunSummary], yielded: int) -> list[RunSummary]:
        return items if self.limit is None else items[: max(0, self.limit - yielded)]

    def done(self, yielded: int) -> bool:
        return self.limit is not None and yielded >= self.limit


def run_call(run_id: str) -> Call[RunDetail]:
    return Call("GET", run_path(run_id), read_run_detail)


def job_call(job_id: int) -> Call[AttributionJob]:
    return Call("GET", f"/api/jobs/{int(job_id)}", read_job)


def jobs_call(run_id: str) -> Call[tuple[AttributionJob, ...]]:
    return Call("GET", run_path(run_id, "/jobs"), read_jobs)


def labels_call(run_id: str) -> Call[tuple[Label, ...]]:
    return Call("GET", run_path(run_id, "/labels"), read_labels)


def ingest_stats_call() -> Call[IngestStats]:
    return Call("GET", "/api/stats/ingest", read_ingest_stats)


def outcome_call(
    run_id: str,
    outcome: str,
    reason: str | None,
    ground_truth: str | None,
    final_answer: str | None,
) -> Call[RunSummary]:
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)} (got {outcome!r})")
    body = {"outcome": outcome}
    optional = {"reason": reason, "ground_truth": ground_truth, "final_answer": final_answer}
    body.update({key: value for key, value in optional.items() if value is not None})
    return Call("POST", run_path(run_id, "/outcome"), read_run_summary, body=body)


def reattribute_call(run_id: str, attributor: str) -> Call[AttributionJob]:
    if not attributor:
        raise ValueError("attributor must not be empty")
    body = {"attributor": attributor}
    return Call("POST", run_path(run_id, "/attributions"), read_job, body=body)


def label_call(
    run_id: str,
    agent: str,
    step: int,
    reason: str | None,
    author: str | None,
    *,
    mode: str | None = None,
    source: str | None = None,
    details: Mapping[str, Any] | None = None,
) -> Call[Label]:
    if not agent:
        raise ValueError("agent must not be empty")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a 0-based step index (got {step!r})")
    body: dict[str, Any] = {"agent": agent, "step": step}
    if reason is not None:
        body["reason"] = reason
    if author is not None:
        body["author"] = author
    if mode is not None:
        body["mode"] = mode
    if source is not None:
        body["source"] = source
    if details is not None:
        body["details"] = dict(details)
    return Call("POST", run_path(run_id, "/labels"), read_label, body=body)


def stats_call(window: float | None, bucket: int | None) -> Call[Stats]:
    params: dict[str, str | int | float] = {}
    if window is not None:
        params["window"] = window
    if bucket is not None:
        params["bucket"] = bucket
    return Call("GET", "/api/stats", read_stats, params=params)
