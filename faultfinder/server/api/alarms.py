"""`GET /api/alarms`: the online auditor's early alarms, newest first."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import Parameter

from faultfinder.attributors.auditor import Alarm
from faultfinder.server.runs import RunService

__all__ = ["AlarmController"]


class AlarmController(Controller):
    tags = ("attribution",)

    @get("/api/alarms", operation_id="listAlarms", summary="Recent early alarms, newest first")
    async def alarms(
        self,
        runs: NamedDependency[RunService],
        limit: Annotated[int, Parameter(ge=1, le=1000)] = 100,
    ) -> list[Alarm]:
        return await runs.recent_alarms(limit)
