"""`GET /api/stats`: blame by agent over time, and each attributor's live accuracy
against human labels."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import FromQuery, Parameter

from faultfinder.server.api.runs import UNIX_SECONDS_MAX
from faultfinder.server.runs import RunService
from faultfinder.server.schemas import Stats

__all__ = ["StatsController"]


class StatsController(Controller):
    tags = ("attribution",)

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
