"""The asyncio client of the sidecar's query API: `Client`'s methods, awaited.

It sends the same requests (`faultfinder.sdk.calls`) and drives the same paging and
polling (`faultfinder.sdk.polling`) as `faultfinder.sdk.client.Client`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, Self, TypeVar

import httpx

from faultfinder.sdk import calls
from faultfinder.sdk.calls import Call, Listing
from faultfinder.sdk.errors import NotFoundError
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
from faultfinder.sdk.transport import answer, request_headers, resolve_base_url, unreachable

__all__ = ["AsyncClient"]

T = TypeVar("T")


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
        self.base_url = resolve_base_url(base_url)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=request_headers(api_key, headers),
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call[T]) -> T:
        try:
            response = await self._http.request(
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
    ) -> AsyncIterator[RunSummary]:
        """Runs, newest first, fetched page after page (`async for`); at most `limit`."""
        listing = Listing(status, project, agent, since, until, limit, page_size)
        return self._pages(Pages(listing))

    async def _pages(self, pages: Pages) -> AsyncIterator[RunSummary]:
        while (call := pages.next_call()) is not None:
            for item in pages.take(await self._send(call)):
                yield item

    async def run(self, run_id: str) -> RunDetail:
        """One run with its trajectory and attributions; `NotFoundError` when unknown."""
        return await self._send(calls.run_call(run_id))

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
        clock = asyncio.get_running_loop().time
        poll = run_poll(run_id, status, timeout=timeout, poll_interval=poll_interval, clock=clock)
        while (detail := poll.settled(await self._run_if_seen(run_id))) is None:
            await asyncio.sleep(poll.pause())
        return detail

    async def _run_if_seen(self, run_id: str) -> RunDetail | None:
        try:
            return await self.run(run_id)
        except NotFoundError:
            return None

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
        return await self._send(
            calls.outcome_call(run_id, outcome, reason, ground_truth, final_answer)
        )

    async def reattribute(self, run_id: str, attributor: str) -> AttributionJob:
        """Queue an attribution of the run by the named attributor; see `wait_for_job`."""
        return await self._send(calls.reattribute_call(run_id, attributor))

    async def job(self, job_id: int) -> AttributionJob:
        """One attribution job."""
        return await self._send(calls.job_call(job_id))

    async def jobs(self, run_id: str) -> tuple[AttributionJob, ...]:
        """Every attribution job of the run."""
        return await self._send(calls.jobs_call(run_id))

    async def wait_for_job(
        self, job_id: int, *, timeout: float = 60.0, poll_interval: float = 0.5
    ) -> AttributionJob:
        """Poll until the job is done or failed; `WaitTimeoutError` after `timeout` s."""
        clock = asyncio.get_running_loop().time
        poll = job_poll(job_id, timeout=timeout, poll_interval=poll_interval, clock=clock)
        while (job := poll.settled(await self.job(job_id))) is None:
            await asyncio.sleep(poll.pause())
        return job

    async def label(
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
        return await self._send(
            calls.label_call(
                run_id, agent, step, reason, author, mode=mode, source=source, details=details
            )
        )

    async def labels(self, run_id: str) -> tuple[Label, ...]:
        """The human labels of the run."""
        return await self._send(calls.labels_call(run_id))

    async def stats(self, *, window: float | None = None, bucket: int | None = None) -> Stats:
        """Runs by status, blame by agent over time, attributor accuracy (see `Client`)."""
        return await self._send(calls.stats_call(window, bucket))

    async def ingest_stats(self) -> IngestStats:
        """Spans received, stored and rejected by the sidecar's OTLP ingest."""
        return await self._send(calls.ingest_stats_call())
