"""`POST /api/attribute`: attribute a trajectory sent in the request; `/api/jobs/{id}`."""

from __future__ import annotations

import asyncio
from typing import Annotated

from litestar import Controller, Response, get, post
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.params import FromPath, FromQuery, JSONBody, Parameter

from faultfinder.server.api.runs import UNIX_SECONDS_MAX, known_attributor
from faultfinder.server.api.schemas import AlarmOut, AttributeIn, JobOut, Stats
from faultfinder.server.attribution import AttributionService
from faultfinder.server.jobs import JobQueue
from faultfinder.server.runs import RunService, job_out
from faultfinder.server.store import SpanStore


class AttributeController(Controller):
    tags = ("attribution",)

    @post(
        "/api/attribute",
        operation_id="attributeTrajectory",
        summary="Attribute a posted trajectory: 200 with the attribution, or 202 with a job",
    )
    async def attribute(
        self,
        data: JSONBody[AttributeIn],
        jobs: NamedDependency[JobQueue],
        attribution: NamedDependency[AttributionService],
    ) -> Response[JobOut]:
        known_attributor(data.attributor)
        if data.wait:
            try:
                async with asyncio.timeout(data.timeout):
                    answer = await attribution.attribute(
                        data.trajectory, data.attributor, use_ground_truth=data.use_ground_truth
                    )
            except TimeoutError:
                pass  # fall through to a job the caller can poll
            else:
                return Response(
                    JobOut(
                        id=0,
                        run_id=None,
                        attributor=data.attributor,
                        status="done",
                        attempts=1,
                        max_attempts=1,
                        attribution=answer,
                    ),
                    status_code=200,
                )
        job = await jobs.enqueue(
            data.attributor, payload={"trajectory": data.trajectory.model_dump(mode="json")}
        )
        return Response(job_out(job), status_code=202)

    @get("/api/jobs/{job_id:int}", operation_id="getJob", summary="An attribution job")
    async def job(
        self,
        job_id: FromPath[int],
        jobs: NamedDependency[JobQueue],
        store: NamedDependency[SpanStore],
    ) -> JobOut:
        # Job ids are positive 32-bit integers in the database; any other number names no
        # job (and must not reach the query, where PostgreSQL would refuse it).
        job = await jobs.get(job_id) if 0 < job_id < 2**31 else None
        if job is None:
            raise NotFoundException(f"no job {job_id}")
        attribution = None
        if job.attribution_id is not None:
            attribution = await store.get_attribution(job.attribution_id)
        return job_out(job, attribution)

    @get("/api/alarms", operation_id="listAlarms", summary="Recent early alarms, newest first")
    async def alarms(
        self,
        runs: NamedDependency[RunService],
        limit: Annotated[int, Parameter(ge=1, le=1000)] = 100,
    ) -> list[AlarmOut]:
        alarms: list[AlarmOut] = await runs.recent_alarms(limit)
        return alarms

    @get("/api/stats", operation_id="stats", summary="Blame by agent over time; live accuracy")
    async def stats(
        self,
        runs: NamedDependency[RunService],
        window: Annotated[
            float, Parameter(gt=0, le=UNIX_SECONDS_MAX, description="Seconds back from now")
        ] = 7 * 86400,
        bucket: FromQuery[int] = 3600,
    ) -> Stats:
        return await runs.stats(window_s=window, bucket_s=max(60, bucket))
