"""Attribution on request: `POST /api/attribute` attributes a trajectory sent in the
request, at once or as a job that `GET /api/jobs/{id}` reports on."""

from __future__ import annotations

import asyncio

from litestar import Controller, Response, get, post
from litestar.di import NamedDependency
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath, JSONBody

from faultfinder.server.api.runs import known_attributor
from faultfinder.server.attribution import AttributionService
from faultfinder.server.runs import job_out
from faultfinder.server.schemas import AttributeIn, JobOut
from faultfinder.server.settings import Settings
from faultfinder.server.store import JobQueue, SpanStore


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
        settings: NamedDependency[Settings],
    ) -> Response[JobOut]:
        known_attributor(data.attributor)
        steps = len(data.trajectory.steps)
        if steps > settings.max_attribution_steps:
            raise HTTPException(
                status_code=413,
                detail=f"the trajectory has {steps} steps; at most "
                f"{settings.max_attribution_steps} may be attributed at once "
                "(FAULTFINDER_MAX_ATTRIBUTION_STEPS)",
            )
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
