"""Labels: a person's verdict on which agent and step made a run fail, or the exact answer
of a controlled failure injection (the gold for live accuracy and for training)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from faultfinder.server.store.rows import UnknownRunError
from faultfinder.server.store.tables import LABELS, clean, now_ns

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
    mode: str | None = None
    source: str = "human"
    details: dict[str, Any] | None = field(default=None, compare=False)


class LabelStore:
    """Human labels (the gold for live accuracy) and the figures built on them."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def add(
        self,
        run_id: str,
        *,
        agent: str,
        step: int,
        reason: str | None,
        author: str | None,
        mode: str | None = None,
        source: str = "human",
        details: dict[str, Any] | None = None,
    ) -> Label:
        values = {
            "run_id": run_id,
            "agent": agent,
            "step": step,
            "reason": reason,
            "author": author,
            "created_at": now_ns(),
            "mode": mode,
            "source": source,
            "details": _storable(details),
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


def _storable(value: Any) -> Any:
    """`value` with every string storable (PostgreSQL's JSONB cannot hold NUL either)."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean(str(key)): _storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(item) for item in value]
    return value
