"""`/api/runs`: list runs with their status and attributions; one run with its trajectory."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Request, get
from litestar.datastructures import State
from litestar.exceptions import NotFoundException, ValidationException
from litestar.params import Parameter

from faultfinder.server.api.schemas import RunDetail, RunPage
from faultfinder.server.runs import RunService
from faultfinder.server.store import InvalidCursorError

RUN_STATUSES = ("running", "complete", "failed", "attributed")


def _service(request: Request[None, None, State]) -> RunService:
    service: RunService = request.app.state.runs
    return service


class RunController(Controller):
    path = "/api/runs"
    tags = ("runs",)

    @get(operation_id="listRuns", summary="List runs, newest first, with cursor pagination")
    async def list_runs(
        self,
        request: Request[None, None, State],
        status: Annotated[
            str | None, Parameter(query="status", description=f"One of {RUN_STATUSES}")
        ] = None,
        project: str | None = None,
        limit: Annotated[int, Parameter(ge=1, le=500)] = 50,
        cursor: str | None = None,
    ) -> RunPage:
        if status is not None and status not in RUN_STATUSES:
            raise ValidationException(f"status must be one of {', '.join(RUN_STATUSES)}")
        try:
            return await _service(request).list_runs(
                status=status, project=project, limit=limit, cursor=cursor
            )
        except InvalidCursorError as exc:
            raise ValidationException(f"cursor: {exc}") from None

    @get(
        "/{run_id:str}",
        operation_id="getRun",
        summary="One run with its trajectory and attributions",
    )
    async def get_run(self, request: Request[None, None, State], run_id: str) -> RunDetail:
        detail = await _service(request).get_run(run_id)
        if detail is None:
            raise NotFoundException(f"no run {run_id!r}")
        return detail
