"""Clients for the sidecar's query API: list runs, read a run's trajectory and attributions,
wait for a verdict, post outcomes and labels, re-attribute, read statistics.

`Client` is synchronous, `AsyncClient` (`faultfinder.sdk.async_client`) the same surface
for asyncio; both send the requests of `faultfinder.sdk.calls`. Results are the frozen
dataclasses of `faultfinder.sdk.models`, re-exported here; every failure is a
`faultfinder.sdk.errors.FaultfinderError`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Self, TypeVar

import httpx

from faultfinder.sdk import calls, models
from faultfinder.sdk.async_client import AsyncClient
from faultfinder.sdk.calls import MAX_PAGE_SIZE as MAX_PAGE_SIZE
from faultfinder.sdk.calls import Call, Listing
from faultfinder.sdk.errors import NotFoundError
from faultfinder.sdk.models import *  # noqa: F403
from faultfinder.sdk.models import (
    FINISHED_STATUSES,
    Attribution,
    AttributionJob,
    IngestStats,
    Label,
    RunDetail,
    RunSummary,
    Stats,
)
from faultfinder.sdk.polling import Pages, job_poll, run_poll
from faultfinder.sdk.transport import (
    DEFAULT_BASE_URL,
    answer,
    request_headers,
    resolve_base_url,
    unreachable,
)

__all__ = ["DEFAULT_BASE_URL", "AsyncClient", "Client"]
__all__ += models.__all__

T = TypeVar("T")


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
        self.base_url = resolve_base_url(base_url)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=request_headers(api_key, headers),
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call[T]) -> T:
        try:
            response = self._http.request(
                call.method, call.path, params=call.params, json=call.body
            )
        except httpx.TransportError as exc:
            raise unreachable(call, self.base_url, exc) from exc
        return answer(call, response)

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
        listing = Listing(status, project, agent, since, until, limit, page_size)
        return self._pages(Pages(listing))

    def _pages(self, pages: Pages) -> Iterator[RunSummary]:
        while (call := pages.next_call()) is not None:
            yield from pages.take(self._send(call))

    def run(self, run_id: str) -> RunDetail:
        """One run with its trajectory and attributions; `NotFoundError` when unknown."""
        return self._send(calls.run_call(run_id))

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
        poll = run_poll(
            run_id, status, timeout=timeout, poll_interval=poll_interval, clock=time.monotonic
        )
        while (detail := poll.settled(self._run_if_seen(run_id))) is None:
            time.sleep(poll.pause())
        return detail

    def _run_if_seen(self, run_id: str) -> RunDetail | None:
        try:
            return self.run(run_id)
        except NotFoundError:
            return None

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
        return self._send(calls.outcome_call(run_id, outcome, reason, ground_truth, final_answer))

    def reattribute(self, run_id: str, attributor: str) -> AttributionJob:
        """Queue an attribution of the run by the named attributor; see `wait_for_job`."""
        return self._send(calls.reattribute_call(run_id, attributor))

    def job(self, job_id: int) -> AttributionJob:
        """One attribution job."""
        return self._send(calls.job_call(job_id))

    def jobs(self, run_id: str) -> tuple[AttributionJob, ...]:
        """Every attribution job of the run."""
        return self._send(calls.jobs_call(run_id))

    def wait_for_job(
        self, job_id: int, *, timeout: float = 60.0, poll_interval: float = 0.5
    ) -> AttributionJob:
        """Poll until the job is done or failed; `WaitTimeoutError` after `timeout` s."""
        poll = job_poll(job_id, timeout=timeout, poll_interval=poll_interval, clock=time.monotonic)
        while (job := poll.settled(self.job(job_id))) is None:
            time.sleep(poll.pause())
        return job

    def label(
        self,
        run_id: str,
        agent: str,
        step: int,
        reason: str | None = None,
        *,
        author: str | None = None,
        mode: str | None = None,
        source: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> Label:
        """Record the true answer for a failed run: the responsible `agent`, 0-based `step`;
        optionally the error `mode` (e.g. "R.3"), the `source` ("human", or "injected" for a
        controlled failure injection's exact label) and its `details`."""
        return self._send(
            calls.label_call(
                run_id, agent, step, reason, author, mode=mode, source=source, details=details
            )
        )

    def labels(self, run_id: str) -> tuple[Label, ...]:
        """The human labels of the run."""
        return self._send(calls.labels_call(run_id))

    def stats(self, *, window: float | None = None, bucket: int | None = None) -> Stats:
        """Runs by status, blame by agent over the last `window` seconds in `bucket`-second
        buckets (the sidecar's defaults: a week, by hour), attributor accuracy."""
        return self._send(calls.stats_call(window, bucket))

    def ingest_stats(self) -> IngestStats:
        """Spans received, stored and rejected by the sidecar's OTLP ingest."""
        return self._send(calls.ingest_stats_call())
