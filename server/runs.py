"""Run queries: stored runs joined with their assembled trajectories and attributions."""

from __future__ import annotations

from faultfinder.attributors.model import Attribution
from faultfinder.server.api.schemas import RunDetail, RunPage, RunSummary
from faultfinder.server.assembler import assemble_trajectory
from faultfinder.server.store import RunRow, SpanStore


def _seconds(nanos: int | None) -> float | None:
    return nanos / 1e9 if nanos else None


class RunService:
    """Reads runs for the API and the dashboard."""

    def __init__(self, store: SpanStore) -> None:
        self._store = store

    async def _summary(self, row: RunRow, attributions: list[Attribution]) -> RunSummary:
        agents, n_steps = row.agents, row.n_steps
        if agents is None or n_steps is None:
            trajectory = assemble_trajectory(row.id, await self._store.run_spans(row.id))
            agents, n_steps = list(trajectory.agents), len(trajectory)
        return RunSummary(
            id=row.id,
            project=row.project,
            status=row.status,
            agents=list(agents),
            n_steps=n_steps,
            n_spans=row.n_spans,
            outcome=row.outcome,
            started_at=_seconds(row.started_at),
            ended_at=_seconds(row.ended_at),
            attributions=attributions,
        )

    async def list_runs(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> RunPage:
        rows, next_cursor = await self._store.list_runs(
            status=status, project=project, limit=limit, cursor=cursor
        )
        attributions = await self._store.attributions_by_run(row.id for row in rows)
        items = [await self._summary(row, attributions.get(row.id, [])) for row in rows]
        return RunPage(items=items, next_cursor=next_cursor)

    async def get_run(self, run_id: str) -> RunDetail | None:
        row = await self._store.get_run(run_id)
        if row is None:
            return None
        trajectory = assemble_trajectory(row.id, await self._store.run_spans(row.id))
        summary = await self._summary(row, await self._store.list_attributions(row.id))
        return RunDetail(
            **summary.model_dump(exclude={"agents", "n_steps"}),
            agents=list(trajectory.agents),
            n_steps=len(trajectory),
            trajectory=trajectory,
        )
