"""`/api/runs`: runs with their status and attributions; verdicts, re-attribution, labels,
verifications."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.exceptions import ValidationException
from litestar.params import FromPath, FromQuery, JSONBody, Parameter

from faultfinder.attributors.base import available_attributors
from faultfinder.attributors.model import Attribution
from faultfinder.server.api.run_paths import as_stored, stored_run_id
from faultfinder.server.metrics import ServerMetrics
from faultfinder.server.runs import CulpritFilter, RunService
from faultfinder.server.schemas import (
    AttributeRunIn,
    JobOut,
    LabelIn,
    LabelOut,
    OutcomeIn,
    RunDetail,
    RunPage,
    RunSummary,
    VerificationIn,
)
from faultfinder.server.settings import Settings
from faultfinder.server.store import InvalidCursorError

RUN_STATUSES = ("running", "complete", "failed", "attributed")
UNIX_SECONDS_MAX = 9_223_372_036.0
"""Latest time the store can compare against (its columns hold int64 nanoseconds)."""


def known_attributor(name: str) -> str:
    if name not in available_attributors():
        raise ValidationException(
            f"attributor: unknown {name!r}; available: {', '.join(available_attributors())}"
        )
    return name


class RunController(Controller):
    path = "/api/runs"
    tags = ("runs",)

    @get(operation_id="listRuns", summary="List runs, newest first, with cursor pagination")
    async def list_runs(
        self,
        runs: NamedDependency[RunService],
        status: Annotated[
            str | None, Parameter(description=f"One of {', '.join(RUN_STATUSES)}")
        ] = None,
        project: FromQuery[str | None] = None,
        agent: Annotated[
            str | None,
            Parameter(description="Only runs whose leading attribution blames this agent"),
        ] = None,
        mode: Annotated[
            str | None,
            Parameter(
                description="Only runs whose leading attribution has this failure mode"
                " (a Who&When Pro code, e.g. R.1, A.1, C.2)",
                max_length=10,
            ),
        ] = None,
        since: Annotated[
            float | None,
            Parameter(
                description="Runs started at/after (Unix seconds)",
                ge=-UNIX_SECONDS_MAX,
                le=UNIX_SECONDS_MAX,
            ),
        ] = None,
        until: Annotated[
            float | None,
            Parameter(
                description="Runs started before (Unix seconds)",
                ge=-UNIX_SECONDS_MAX,
                le=UNIX_SECONDS_MAX,
            ),
        ] = None,
        limit: Annotated[int, Parameter(ge=1, le=500)] = 50,
        cursor: FromQuery[str | None] = None,
        *,
        settings: NamedDependency[Settings],
    ) -> RunPage:
        if status is not None and status not in RUN_STATUSES:
            raise ValidationException(f"status must be one of {', '.join(RUN_STATUSES)}")
        try:
            return await runs.list_runs(
                status=status,
                project=as_stored(project) if project is not None else None,
                culprit=CulpritFilter(
                    agent=as_stored(agent) if agent is not None else None,
                    mode=mode or None,
                    preferred=tuple(settings.attributors),
                ),
                since=since,
                until=until,
                limit=limit,
                cursor=cursor,
            )
        except InvalidCursorError as exc:
            raise ValidationException(f"cursor: {exc}") from None

    @get(
        "/{run_id:str}",
        operation_id="getRun",
        summary="One run with its trajectory and attributions",
    )
    async def get_run(
        self,
        runs: NamedDependency[RunService],
        run_id: FromPath[str],
        steps_offset: Annotated[
            int, Parameter(ge=0, description="First step of the trajectory to return")
        ] = 0,
        steps_limit: Annotated[
            int | None,
            Parameter(ge=1, description="Most steps to return (default: all from the offset)"),
        ] = None,
    ) -> RunDetail:
        return await runs.get_run(
            stored_run_id(run_id), steps_offset=steps_offset, steps_limit=steps_limit
        )

    @post(
        "/{run_id:str}/outcome",
        operation_id="postOutcome",
        summary="Record a verdict (e.g. a grader's); failure triggers attribution",
        status_code=200,
    )
    async def post_outcome(
        self, runs: NamedDependency[RunService], run_id: FromPath[str], data: JSONBody[OutcomeIn]
    ) -> RunSummary:
        return await runs.post_outcome(
            stored_run_id(run_id),
            data.outcome,
            reason=data.reason,
            ground_truth=data.ground_truth,
            final_answer=data.final_answer,
        )

    @post(
        "/{run_id:str}/attributions",
        operation_id="reattributeRun",
        summary="Attribute the run again with a named attributor (202 + job)",
        status_code=202,
    )
    async def reattribute(
        self,
        runs: NamedDependency[RunService],
        run_id: FromPath[str],
        data: JSONBody[AttributeRunIn],
    ) -> JobOut:
        known_attributor(data.attributor)
        return await runs.reattribute(stored_run_id(run_id), data.attributor)

    @get("/{run_id:str}/jobs", operation_id="listRunJobs", summary="The run's attribution jobs")
    async def jobs(self, runs: NamedDependency[RunService], run_id: FromPath[str]) -> list[JobOut]:
        jobs: list[JobOut] = await runs.jobs(stored_run_id(run_id))
        return jobs

    @post(
        "/{run_id:str}/labels",
        operation_id="labelRun",
        summary="A verdict (a person's or an injection's): the agent and step that caused the"
        " failure",
        status_code=201,
    )
    async def add_label(
        self, runs: NamedDependency[RunService], run_id: FromPath[str], data: JSONBody[LabelIn]
    ) -> LabelOut:
        try:
            return await runs.add_label(
                stored_run_id(run_id),
                agent=data.agent,
                step=data.step,
                reason=as_stored(data.reason) if data.reason is not None else None,
                author=as_stored(data.author) if data.author is not None else None,
                mode=as_stored(data.mode) if data.mode is not None else None,
                source=data.source,
                details=data.details,
            )
        except ValueError as exc:
            raise ValidationException(str(exc)) from None

    @post(
        "/{run_id:str}/verifications",
        operation_id="verifyRun",
        summary="A counterfactual verification (`faultfinder verify`): stored as the run's"
        " attribution of method `counterfactual`",
        status_code=201,
    )
    async def add_verification(
        self,
        runs: NamedDependency[RunService],
        metrics: NamedDependency[ServerMetrics],
        run_id: FromPath[str],
        data: JSONBody[VerificationIn],
    ) -> Attribution:
        try:
            answer = await runs.add_verification(stored_run_id(run_id), data)
        except ValueError as exc:
            raise ValidationException(str(exc)) from None
        metrics.observe_verification(c.result for c in data.candidates)
        return answer

    @get("/{run_id:str}/labels", operation_id="listRunLabels", summary="The run's human labels")
    async def labels(
        self, runs: NamedDependency[RunService], run_id: FromPath[str]
    ) -> list[LabelOut]:
        labels: list[LabelOut] = await runs.labels(stored_run_id(run_id))
        return labels
