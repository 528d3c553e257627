"""Human labels: a person's verdict on which agent and step made a run fail (the gold for
live accuracy)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from faultfinder.server.store.rows import UnknownRunError
from faultfinder.server.store.tables import LABELS, now_ns

__all__ = ["Label", "LabelStore"]


@dataclass(frozen=True)
class Label:
    """A human's verdict on a run: the agent and 0-based step that caused the failure."""

    id: int
    run_id: str
    agent: str
    step: int
    reason: str | None
    author: str | None
    created_at: int


class LabelStore:
    """Human labels (the gold for live accuracy) and the figures built on them."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def add(
        self, run_id: str, *, agent: str, step: int, reason: str | None, author: str | None
    ) -> Label:
        values = {
            "run_id": run_id,
            "agent": agent,
            "step": step,
            "reason": reason,
            "author": author,
            "created_at": now_ns(),
        }
        try:
            async with self._engine.begin() as conn:
                row = (
                    await conn.execute(LABELS.insert().values(values).returning(*LABELS.c))
                ).one()
        except IntegrityError:
            raise UnknownRunError(f"no run {run_id!r} to label") from None
        return Label(**row._mapping)

    async def for_run(self, run_id: str) -> list[Label]:
        async with self._engine.connect() as conn:
            rows = await conn.execute(
                select(LABELS).where(LABELS.c.run_id == run_id).order_by(LABELS.c.id)
            )
            return [Label(**row._mapping) for row in rows]

    async def latest_by_run(self) -> dict[str, Label]:
        """The newest label of every labelled run."""
        async with self._engine.connect() as conn:
            rows = await conn.execute(select(LABELS).order_by(LABELS.c.id))
            return {row.run_id: Label(**row._mapping) for row in rows}
