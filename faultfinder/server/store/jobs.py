"""Durable attribution jobs: rows in the database, claimed by workers, retried with backoff.

A job is claimed with `FOR UPDATE SKIP LOCKED` on PostgreSQL, so any number of
workers on any number of machines share the table without running a job twice; on
SQLite the claim is a compare-and-set update (one in-process worker is the norm).
A claim is a lease: a worker renews it while it works, and a job whose lease ran
out (its worker died) is queued again. A job that keeps failing ends `failed` with
its last error; nothing is dropped silently.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Update, and_, exists, func, not_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faultfinder.attributors.model import Attribution, AttributionStatus
from faultfinder.server.db.models import JobStatus, RunStatus
from faultfinder.server.store.contents import job_census
from faultfinder.server.store.tables import JOBS, RUNS, insert_for, now_ns

RecordAttribution = Callable[[AsyncConnection, str, Attribution, int], Awaitable[int]]
"""Stores a run's attribution on a connection, in the transaction that settles its job, and
moves the run on (`SpanStore.record_attribution`, the owner of runs and attributions):
(connection, run id, attribution, now in ns) -> the attribution's id."""

AUTO = "auto"
"""Trigger of the jobs the lifecycle enqueues for a failed run (once per attributor)."""


def _update_own_running(job_id: int, owner: str, /, **values: Any) -> Update:
    """UPDATE of a job only while it runs under `owner`'s claim, returning its id: a worker
    whose lease ran out (and whose job went to another) changes nothing."""
    return (
        update(JOBS)
        .where(
            JOBS.c.id == job_id,
            JOBS.c.worker == owner,
            JOBS.c.status == JobStatus.RUNNING.value,
        )
        .values(**values)
        .returning(JOBS.c.id)
    )


@dataclass(frozen=True)
class Job:
    id: int
    run_id: str | None
    attributor: str
    trigger: str
    status: str
    attempts: int
    max_attempts: int
    not_before: int
    lease_until: int | None
    worker: str | None
    last_error: str | None
    attribution_id: int | None
    payload: dict[str, Any] | None
    created_at: int
    updated_at: int

    @classmethod
    def from_row(cls, row: Any) -> Job:
        return cls(**{name: row._mapping[name] for name in cls.__dataclass_fields__})


class JobQueue:
    """Enqueue, claim, renew, finish and retry attribution jobs.

    The queue owns the jobs table only: a run job's attribution is stored, and its run
    moved on, by `record_attribution` (the span store's), in the queue's transaction.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        record_attribution: RecordAttribution,
        max_attempts: int = 3,
        backoff_s: float = 2.0,
        backoff_max_s: float = 300.0,
    ) -> None:
        self._engine = engine
        self._record_attribution = record_attribution
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s
        self._backoff_max_s = backoff_max_s
        self._postgres = engine.dialect.name == "postgresql"
        self._insert: Any = insert_for(engine)
        self._listeners: list[Callable[[], None]] = []

    async def job_census(self) -> list[tuple[str | None, str, str, int]]:
        """(run id, attributor, status, attempts) of every job (the chaos drills' check)."""
        return await job_census(self._engine)

    def on_enqueue(self, listener: Callable[[], None]) -> None:
        """Call `listener` after each commit that queued jobs through this queue, so a
        worker in this process starts them at once instead of at its next poll."""
        self._listeners.append(listener)

    def _queued(self) -> None:
        for listener in self._listeners:
            listener()

    def _new_job(
        self,
        attributor: str,
        *,
        run_id: str | None,
        trigger: str,
        payload: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        now = now_ns()
        return {
            "run_id": run_id,
            "attributor": attributor,
            "trigger": trigger,
            "status": JobStatus.QUEUED.value,
            "attempts": 0,
            "max_attempts": self._max_attempts,
            "not_before": now,
            "payload": payload,
            "created_at": now,
            "updated_at": now,
        }

    async def enqueue(
        self, attributor: str, *, run_id: str | None = None, payload: dict[str, Any] | None = None
    ) -> Job:
        """A new job on request (re-attribution, ad-hoc trajectory)."""
        values = self._new_job(
            attributor, run_id=run_id, trigger=f"manual-{secrets.token_hex(8)}", payload=payload
        )
        async with self._engine.begin() as conn:
            row = (await conn.execute(JOBS.insert().values(values).returning(*JOBS.c))).one()
        self._queued()
        return Job.from_row(row)

    async def enqueue_for_failed_runs(self, attributors: Sequence[str], *, limit: int = 500) -> int:
        """Give every failed run its automatic jobs, once per attributor; returns how many.

        Idempotent (a unique index on run, attributor and trigger), so replicas may all
        call it, and a crash between a run failing and its jobs being written is healed
        on the next call.
        """
        if not attributors:
            return 0
        missing = (
            select(RUNS.c.id)
            .where(RUNS.c.status == RunStatus.FAILED.value)
            .where(not_(exists().where(and_(JOBS.c.run_id == RUNS.c.id, JOBS.c.trigger == AUTO))))
            .limit(limit)
        )
        async with self._engine.begin() as conn:
            run_ids = [row.id for row in await conn.execute(missing)]
            if not run_ids:
                return 0
            rows = [
                self._new_job(name, run_id=run_id, trigger=AUTO)
                for run_id in run_ids
                for name in attributors
            ]
            statement = self._insert(JOBS).on_conflict_do_nothing().returning(JOBS.c.id)
            queued = len((await conn.execute(statement, rows)).all())
        if queued:
            self._queued()
        return queued

    async def claim(
        self,
        worker: str,
        *,
        lease_s: float,
        only: Collection[str] | None = None,
        excluding: Collection[str] = (),
    ) -> Job | None:
        """Take the oldest due queued job, leased to `worker`; None when there is none.

        `only` and `excluding` restrict the claim to the jobs of those attributors, or of
        the others: a worker's lanes, so that a job waiting for a slow model never keeps a
        zero-LLM one from starting."""
        if only is not None and not only:
            return None
        now = now_ns()
        due = (
            select(JOBS.c.id)
            .where(JOBS.c.status == JobStatus.QUEUED.value, JOBS.c.not_before <= now)
            .order_by(JOBS.c.not_before, JOBS.c.id)
            .limit(1)
        )
        if only is not None:
            due = due.where(JOBS.c.attributor.in_(sorted(only)))
        if excluding:
            due = due.where(JOBS.c.attributor.not_in(sorted(excluding)))
        if self._postgres:
            due = due.with_for_update(skip_locked=True)
        async with self._engine.begin() as conn:
            job_id = (await conn.execute(due)).scalar_one_or_none()
            if job_id is None:
                return None
            claimed = (
                await conn.execute(
                    update(JOBS)
                    .where(JOBS.c.id == job_id, JOBS.c.status == JobStatus.QUEUED.value)
                    .values(
                        status=JobStatus.RUNNING.value,
                        attempts=JOBS.c.attempts + 1,
                        worker=worker,
                        lease_until=now + int(lease_s * 1e9),
                        updated_at=now,
                    )
                    .returning(*JOBS.c)
                )
            ).one_or_none()
        return Job.from_row(claimed) if claimed is not None else None

    async def renew(self, job_id: int, worker: str, *, lease_s: float) -> bool:
        """Extend a running job's lease; False if the job is no longer this worker's."""
        now = now_ns()
        async with self._engine.begin() as conn:
            result = await conn.execute(
                _update_own_running(
                    job_id, worker, lease_until=now + int(lease_s * 1e9), updated_at=now
                )
            )
            return result.first() is not None

    async def finish_with_attribution(
        self, job: Job, worker: str, attribution: Attribution
    ) -> bool:
        """Store a run job's attribution and settle the job in one transaction.

        Only while `worker` still holds the job: a worker whose lease ran out (and
        whose job another worker took over) stores nothing, so each job's attribution
        is stored once. An ok attribution moves its failed run to `attributed`.
        A failed attribution (the job's last attempt) is stored too, so the failure and
        its reason are visible. Returns False when the lease was lost.
        """
        now = now_ns()
        ok = attribution.status is AttributionStatus.OK
        async with self._engine.begin() as conn:
            owned = await conn.execute(
                _update_own_running(
                    job.id,
                    worker,
                    status=(JobStatus.DONE if ok else JobStatus.FAILED).value,
                    last_error=None if ok else attribution.failure_reason,
                    lease_until=None,
                    updated_at=now,
                )
            )
            if owned.first() is None:
                await conn.rollback()
                return False
            attribution_id: int | None = None
            if job.run_id is not None:
                attribution_id = await self._record_attribution(conn, job.run_id, attribution, now)
            else:
                # Ad-hoc trajectories have no run: the attribution travels in the job.
                payload = {
                    **(job.payload or {}),
                    "attribution": attribution.model_dump(mode="json"),
                }
                await conn.execute(update(JOBS).where(JOBS.c.id == job.id).values(payload=payload))
            await conn.execute(
                update(JOBS).where(JOBS.c.id == job.id).values(attribution_id=attribution_id)
            )
        return True

    async def give_up(self, job_id: int, worker: str, *, error: str) -> bool:
        """Mark a job failed for good with its reason (nothing to attribute)."""
        now = now_ns()
        async with self._engine.begin() as conn:
            result = await conn.execute(
                _update_own_running(
                    job_id,
                    worker,
                    status=JobStatus.FAILED.value,
                    last_error=error,
                    lease_until=None,
                    updated_at=now,
                )
            )
            return result.first() is not None

    async def retry_later(self, job: Job, worker: str, *, error: str) -> bool:
        """Queue a job again after a failed attempt, with exponential backoff."""
        delay = min(self._backoff_s * 2 ** max(job.attempts - 1, 0), self._backoff_max_s)
        now = now_ns()
        async with self._engine.begin() as conn:
            result = await conn.execute(
                _update_own_running(
                    job.id,
                    worker,
                    status=JobStatus.QUEUED.value,
                    not_before=now + int(delay * 1e9),
                    lease_until=None,
                    worker=None,
                    last_error=error,
                    updated_at=now,
                )
            )
            return result.first() is not None

    async def requeue_expired(self) -> int:
        """Jobs whose worker stopped renewing (it died): queue again, or fail if out of tries."""
        now = now_ns()
        expired = and_(JOBS.c.status == JobStatus.RUNNING.value, JOBS.c.lease_until < now)
        async with self._engine.begin() as conn:
            failed = await conn.execute(
                update(JOBS)
                .where(expired, JOBS.c.attempts >= JOBS.c.max_attempts)
                .values(
                    status=JobStatus.FAILED.value,
                    last_error=func.coalesce(JOBS.c.last_error, "worker lost")
                    + " (lease expired on the last attempt)",
                    lease_until=None,
                    updated_at=now,
                )
                .returning(JOBS.c.id)
            )
            queued = await conn.execute(
                update(JOBS)
                .where(expired)
                .values(
                    status=JobStatus.QUEUED.value,
                    not_before=now,
                    lease_until=None,
                    worker=None,
                    last_error="the worker's lease expired; attempt abandoned",
                    updated_at=now,
                )
                .returning(JOBS.c.id)
            )
            return len(failed.all()) + len(queued.all())

    async def get(self, job_id: int) -> Job | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(JOBS).where(JOBS.c.id == job_id))).one_or_none()
        return Job.from_row(row) if row is not None else None

    async def for_run(self, run_id: str) -> list[Job]:
        async with self._engine.connect() as conn:
            rows = await conn.execute(
                select(JOBS).where(JOBS.c.run_id == run_id).order_by(JOBS.c.id)
            )
            return [Job.from_row(row) for row in rows]

    async def counts(self) -> dict[str, int]:
        """Jobs by status (for /metrics and /readyz)."""
        async with self._engine.connect() as conn:
            rows = await conn.execute(select(JOBS.c.status, func.count()).group_by(JOBS.c.status))
            return {status: count for status, count in rows.tuples()}

    async def counts_by_attributor(self) -> dict[tuple[str, str], int]:
        """Jobs by (attributor, status), for /metrics."""
        statement = select(JOBS.c.attributor, JOBS.c.status, func.count()).group_by(
            JOBS.c.attributor, JOBS.c.status
        )
        async with self._engine.connect() as conn:
            rows = await conn.execute(statement)
            return {(attributor, status): count for attributor, status, count in rows.tuples()}
