"""What both clients drive in a loop: paging through runs and polling until a status.

`Pages` and `Poll` decide what to request next, when to stop and when time is up; the
clients only send the requests and sleep (with `time.sleep` or `asyncio.sleep`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar

from faultfinder.sdk.calls import Call, Listing, RunPage
from faultfinder.sdk.errors import WaitTimeoutError
from faultfinder.sdk.models import (
    FINISHED_JOB_STATUSES,
    RUN_STATUSES,
    AttributionJob,
    RunDetail,
    RunSummary,
)


class _HasStatus(Protocol):
    @property
    def status(self) -> str: ...


S = TypeVar("S", bound=_HasStatus)


class Pages:
    """Where a `runs()` listing stands: runs handed out so far and the next cursor."""

    def __init__(self, listing: Listing) -> None:
        self.listing = listing
        self.yielded = 0
        self.cursor: str | None = None
        self.last_page = False

    def next_call(self) -> Call[RunPage] | None:
        """The request for the next page, or None when the listing is complete."""
        if self.last_page or self.listing.done(self.yielded):
            return None
        return self.listing.page(self.yielded, self.cursor)

    def take(self, page: RunPage) -> list[RunSummary]:
        """The runs of a fetched page to hand out (no more than `limit` allows)."""
        items, self.cursor = page
        wanted = self.listing.wanted(items, self.yielded)
        self.yielded += len(wanted)
        self.last_page = self.cursor is None or not items
        return wanted


def _wanted_statuses(status: str | Iterable[str], allowed: Iterable[str]) -> frozenset[str]:
    allowed = tuple(allowed)
    wanted = frozenset({status} if isinstance(status, str) else status)
    unknown = sorted(wanted - set(allowed))
    if not wanted or unknown:
        raise ValueError(
            f"status must be among {', '.join(allowed)} (got {', '.join(unknown) or 'none'})"
        )
    return wanted


class Poll(Generic[S]):
    """One wait for something (a run, a job) to reach one of the `wanted` statuses.

    The deadline starts when the poll is made; `clock` is the monotonic clock the
    client sleeps by.
    """

    def __init__(
        self,
        subject: str,
        wanted: frozenset[str],
        *,
        timeout: float,
        poll_interval: float,
        clock: Callable[[], float],
    ) -> None:
        self.subject = subject
        self.wanted = wanted
        self.timeout = timeout
        self.poll_interval = poll_interval
        self.clock = clock
        self.deadline = clock() + timeout
        self.last: str | None = None

    def settled(self, seen: S | None) -> S | None:
        """`seen` when it has a wanted status; None to go on (None: not there yet)."""
        if seen is None:
            return None
        if seen.status in self.wanted:
            return seen
        self.last = seen.status
        return None

    def pause(self) -> float:
        """Seconds to sleep before the next look; `WaitTimeoutError` once time is up."""
        remaining = self.deadline - self.clock()
        if remaining <= 0:
            raise WaitTimeoutError(self.subject, self.wanted, self.last, self.timeout)
        return min(self.poll_interval, remaining)


def run_poll(
    run_id: str,
    status: str | Iterable[str],
    *,
    timeout: float,
    poll_interval: float,
    clock: Callable[[], float],
) -> Poll[RunDetail]:
    """The wait of `wait_for_run`: until the run has one of `status`."""
    wanted = _wanted_statuses(status, RUN_STATUSES)
    return Poll(
        f"run {run_id!r}", wanted, timeout=timeout, poll_interval=poll_interval, clock=clock
    )


def job_poll(
    job_id: int, *, timeout: float, poll_interval: float, clock: Callable[[], float]
) -> Poll[AttributionJob]:
    """The wait of `wait_for_job`: until the job is done or failed."""
    return Poll(
        f"job {job_id}",
        FINISHED_JOB_STATUSES,
        timeout=timeout,
        poll_interval=poll_interval,
        clock=clock,
    )
