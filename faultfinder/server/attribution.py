"""The attribution service: run configured attributors on failed runs, as durable jobs.

`AttributionService.attribute` runs one attributor on one trajectory and always
returns a validated `Attribution` (a failure is a value with its reason).
`AttributionWorker` is the daemon that claims jobs, renews their leases while it
works, stores results exactly once, and retries failures with backoff. It claims in two
lanes: the jobs of attributors that ask a model, and those of the zero-LLM ones, each
with slots of its own, so a model taking minutes never delays a zero-LLM answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from faultfinder.attributors.base import (
    AttributeOptions,
    Attributor,
    available_attributors,
    calls_model,
    close_attributor,
    get_attributor,
)
from faultfinder.attributors.model import (
    Attribution,
    AttributionStatus,
    Trajectory,
    validate_against,
)
from faultfinder.server.daemon import Daemon
from faultfinder.server.db.failures import log_round_failure
from faultfinder.server.store import Job, JobQueue, SpanStore
from faultfinder.server.trajectories import run_trajectory

if TYPE_CHECKING:
    from faultfinder.attributors.context import AttributorContext

log = logging.getLogger(__name__)

# Trajectory metadata an attributor must never see: the gold label a benchmark replay
# or a human attached to the run.
HIDDEN_METADATA = ("label",)

OnAttribution = Callable[[str | None, Attribution], Awaitable[None]]


def without_gold(trajectory: Trajectory) -> Trajectory:
    """The trajectory as an attributor may see it (no gold label in its metadata)."""
    if not any(key in trajectory.metadata for key in HIDDEN_METADATA):
        return trajectory
    metadata = {k: v for k, v in trajectory.metadata.items() if k not in HIDDEN_METADATA}
    return trajectory.model_copy(update={"metadata": metadata})


async def _attribute(
    attributor: Attributor, trajectory: Trajectory, options: AttributeOptions
) -> Attribution:
    """`attributor.attribute`, in a worker thread (with its own event loop) when the
    attributor declares itself `cpu_bound`: its computation then shares the process with
    ingest instead of holding the event loop for its whole length."""
    if not getattr(attributor, "cpu_bound", False):
        return await attributor.attribute(trajectory, options)
    return await anyio.to_thread.run_sync(
        lambda: asyncio.run(attributor.attribute(trajectory, options)), abandon_on_cancel=True
    )


STORED_CANDIDATES = 50
"""Most candidate steps an attribution keeps (the strongest; attributors rank them)."""


class AttributionService:
    """Builds attributors by name (once each) and runs them safely.

    Factories that take a context get `context` (its settings, learned model and shared
    model connections); `attributor_config` holds other constructor arguments by name.
    `aclose` closes the attributors built and then the context, once, when the service stops.
    """

    def __init__(
        self,
        store: SpanStore,
        *,
        context: AttributorContext | None = None,
        attributor_config: Mapping[str, Mapping[str, Any]] | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        self._store = store
        self._context = context
        self._config = dict(attributor_config or {})
        self._timeout_s = timeout_s
        self._attributors: dict[str, Attributor] = {}

    def attributor(self, name: str) -> Attributor:
        """The attributor registered as `name` (raises UnknownAttributorError)."""
        if name not in self._attributors:
            self._attributors[name] = get_attributor(
                name, self._context, **self._config.get(name, {})
            )
        return self._attributors[name]

    async def aclose(self) -> None:
        """Close what the attributors hold open, then the context's model connections."""
        attributors, self._attributors = list(self._attributors.values()), {}
        for attributor in attributors:
            try:
                await close_attributor(attributor)
            except Exception:
                log.exception("closing attributor %s failed", attributor.name)
        if self._context is not None:
            await self._context.aclose()

    async def attribute(
        self, trajectory: Trajectory, name: str, *, use_ground_truth: bool | None = None
    ) -> Attribution:
        """Run attributor `name`; never raises for the attributor's own failures."""
        visible = without_gold(trajectory)
        with_truth = (
            visible.ground_truth is not None if use_ground_truth is None else use_ground_truth
        )
        options = AttributeOptions(use_ground_truth=with_truth)
        started = time.perf_counter()
        try:
            attributor = self.attributor(name)
            async with asyncio.timeout(self._timeout_s):
                attribution = await _attribute(attributor, visible, options)
        except TimeoutError:
            return Attribution.failed(
                name,
                f"timed out after {self._timeout_s:g}s",
                latency_s=time.perf_counter() - started,
            )
        except Exception as exc:  # an attributor's bug must not take the worker down
            log.exception("attributor %s raised on run %s", name, trajectory.run_id)
            return Attribution.failed(
                name, f"{type(exc).__name__}: {exc}", latency_s=time.perf_counter() - started
            )
        if attribution.latency_s == 0.0:
            # Methods that do not time themselves get the time measured here.
            attribution = attribution.model_copy(
                update={"latency_s": time.perf_counter() - started}
            )
        if len(attribution.candidates) > STORED_CANDIDATES:
            # A 20,000-step run's every step ranked would make each read of the run (its
            # page, its API answer) megabytes long; the strongest ones are what is read.
            strongest = sorted(attribution.candidates, key=lambda c: (-c.score, c.step))
            attribution = attribution.model_copy(
                update={"candidates": tuple(strongest[:STORED_CANDIDATES])}
            )
        problem = validate_against(attribution, visible)
        if problem is not None:
            return Attribution.failed(
                name,
                f"invalid answer: {problem}",
                llm_calls=attribution.llm_calls,
                prompt_tokens=attribution.prompt_tokens,
                completion_tokens=attribution.completion_tokens,
                latency_s=attribution.latency_s,
                model=attribution.model,
            )
        return attribution

    async def trajectory_of(self, job: Job) -> Trajectory | None:
        """The trajectory a job is about (assembled from the run's spans, or posted)."""
        if job.run_id is not None:
            run_id = job.run_id
            # What was posted for the run (a grader's ground truth) reaches the attributor.
            row = await self._store.get_run(run_id)
            # Assembled off the event loop: a large run takes seconds to assemble, which
            # on the loop would stall ingest for as long.
            return await self._store.with_run_spans(
                run_id, lambda spans: run_trajectory(run_id, spans, row) if spans else None
            )
        if job.payload and "trajectory" in job.payload:
            return Trajectory.model_validate(job.payload["trajectory"])
        return None


@dataclass(frozen=True)
class Lane:
    """The jobs some of a worker's slots claim: those of the attributors in `only` (all
    when None), except those in `excluding`."""

    name: str
    only: frozenset[str] | None = None
    excluding: frozenset[str] = frozenset()


def zero_llm_attributors() -> frozenset[str]:
    """The registered attributors that ask no model (`base.calls_model`)."""
    return frozenset(name for name in available_attributors() if not calls_model(name))


@dataclass(frozen=True)
class Slots:
    """How many jobs a worker runs at once: `model` of attributors that ask a model (at
    least one), `zero_llm` of the others (0: the `model` slots take those too)."""

    model: int = 1
    zero_llm: int = 0


def lanes(slots: Slots) -> list[tuple[Lane, int]]:
    """Each lane with its slots: with `zero_llm` slots the zero-LLM attributors get a lane
    of their own (first: it does the queue's housekeeping, never held up by a model) and
    the `model` slots take every other job; without, those take all."""
    if slots.zero_llm <= 0:
        return [(Lane("any"), max(1, slots.model))]
    fast = zero_llm_attributors()
    return [
        (Lane("zero-llm", only=fast), slots.zero_llm),
        (Lane("model", excluding=fast), max(1, slots.model)),
    ]


class AttributionWorker(Daemon):
    """Daemon: claim jobs, attribute, store; `async with AttributionWorker(...)`.

    `slots.model` loops claim and run the jobs of attributors that ask a model side by
    side, and `slots.zero_llm` loops those of the zero-LLM ones (with 0, the first loops
    take every job); the first loop also does the queue's housekeeping."""

    name = "faultfinder-worker"

    def __init__(
        self,
        service: AttributionService,
        jobs: JobQueue,
        *,
        slots: Slots = Slots(),
        poll_interval: float = 0.5,
        lease_s: float = 60.0,
        auto_attributors: tuple[str, ...] = (),
        on_attribution: OnAttribution | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__()
        self._service = service
        self._jobs = jobs
        self._slots = slots
        self._poll_interval = poll_interval
        self._lease_s = lease_s
        self._auto = auto_attributors
        self._on_attribution = on_attribution
        self.worker_id = name or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        """The name the worker claims jobs under (host, process, object)."""
        self.executed = 0
        self._work = asyncio.Event()

    def wake(self) -> None:
        """Jobs were queued (`JobQueue.on_enqueue`): idle loops claim now, not at their
        next poll. Jobs queued by other processes are still found by polling."""
        self._work.set()

    def stop_requested(self) -> None:
        self._work.set()

    async def _idle(self) -> None:
        """Wait for `wake`, a stop, or the poll interval, whichever comes first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._work.wait(), self._poll_interval)
        self._work.clear()

    def lanes(self) -> list[tuple[Lane, int]]:
        """The worker's lanes and their slots (the attributors registered by now)."""
        return lanes(self._slots)

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        loops: list[Coroutine[Any, Any, None]] = []
        for lane, slots in self.lanes():
            for _ in range(slots):
                loops.append(self._loop(lane, housekeeping=not loops))
        return loops

    async def run(self) -> None:
        await self._loop(Lane("any"), housekeeping=True)

    async def _loop(self, lane: Lane, *, housekeeping: bool) -> None:
        while not self.stopping:
            try:
                if housekeeping:
                    # Housekeeping on one slot: jobs of dead workers, failed runs without jobs.
                    await self._jobs.requeue_expired()
                    await self._jobs.enqueue_for_failed_runs(self._auto)
                job = await self._jobs.claim(
                    self.worker_id,
                    lease_s=self._lease_s,
                    only=lane.only,
                    excluding=lane.excluding,
                )
            except Exception as error:
                log_round_failure(log, "claiming a job", error)
                job = None
            if job is None:
                await self._idle()
                continue
            await self._execute(job)

    async def _renew_lease(self, job: Job) -> None:
        while True:
            await asyncio.sleep(self._lease_s / 3)
            if not await self._jobs.renew(job.id, self.worker_id, lease_s=self._lease_s):
                log.warning("lost the lease on job %s", job.id)
                return

    async def _execute(self, job: Job) -> None:
        renewer = asyncio.create_task(self._renew_lease(job))
        try:
            trajectory = await self._service.trajectory_of(job)
            if trajectory is None:
                await self._jobs.give_up(
                    job.id, self.worker_id, error="the run has no spans to attribute"
                )
                return
            attribution = await self._service.attribute(trajectory, job.attributor)
            self.executed += 1
        except Exception as exc:
            log.exception("job %s failed", job.id)
            attribution = Attribution.failed(job.attributor, f"{type(exc).__name__}: {exc}")
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
        if attribution.status is AttributionStatus.FAILED and job.attempts < job.max_attempts:
            await self._jobs.retry_later(
                job, self.worker_id, error=attribution.failure_reason or ""
            )
            return
        stored = await self._jobs.finish_with_attribution(job, self.worker_id, attribution)
        if stored and self._on_attribution is not None:
            try:
                await self._on_attribution(job.run_id, attribution)
            except Exception:
                log.exception("attribution hook failed for job %s", job.id)
