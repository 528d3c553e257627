"""The attributions table: one statement to store an attribution, used by the span store
(an attribution posted or computed in-process) and by the job queue (in the transaction
that settles the job)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faultfinder.attributors.failure_modes import answer_mode
from faultfinder.attributors.model import Attribution
from faultfinder.server.store.tables import ATTRIBUTIONS

__all__ = ["blame_after", "insert_attribution", "ok_attribution_modes", "ok_attributions"]


async def insert_attribution(
    conn: AsyncConnection, run_id: str, attribution: Attribution, *, now: int
) -> int:
    """Store `attribution` of run `run_id` on `conn`; returns its id. An unknown run raises
    the database's IntegrityError (the foreign key)."""
    statement = (
        ATTRIBUTIONS.insert()
        .values(
            run_id=run_id,
            method=attribution.method,
            status=str(attribution.status),
            agent=attribution.agent,
            step=attribution.step,
            payload=attribution.model_dump(mode="json"),
            created_at=now,
        )
        .returning(ATTRIBUTIONS.c.id)
    )
    attribution_id: int = (await conn.execute(statement)).scalar_one()
    return attribution_id


async def ok_attributions(
    engine: AsyncEngine, *, since_ns: int | None = None
) -> list[tuple[str, str, str, int, int]]:
    """(run id, method, agent, step, created_at) of every ok attribution, oldest first."""
    statement = select(
        ATTRIBUTIONS.c.run_id,
        ATTRIBUTIONS.c.method,
        ATTRIBUTIONS.c.agent,
        ATTRIBUTIONS.c.step,
        ATTRIBUTIONS.c.created_at,
    ).where(ATTRIBUTIONS.c.status == "ok")
    if since_ns is not None:
        statement = statement.where(ATTRIBUTIONS.c.created_at >= since_ns)
    async with engine.connect() as conn:
        rows = await conn.execute(statement.order_by(ATTRIBUTIONS.c.id))
        return [(row[0], row[1], row[2], row[3], row[4]) for row in rows]


async def ok_attribution_modes(
    engine: AsyncEngine, *, since_ns: int | None = None
) -> list[tuple[str, str, str | None, int]]:
    """(run id, agent, failure mode or None, created_at) of every ok attribution, oldest
    first; the mode read from the stored answer (derived from its evidence when it was
    stored without one)."""
    statement = select(
        ATTRIBUTIONS.c.run_id,
        ATTRIBUTIONS.c.agent,
        ATTRIBUTIONS.c.payload,
        ATTRIBUTIONS.c.created_at,
    ).where(ATTRIBUTIONS.c.status == "ok")
    if since_ns is not None:
        statement = statement.where(ATTRIBUTIONS.c.created_at >= since_ns)
    async with engine.connect() as conn:
        rows = await conn.execute(statement.order_by(ATTRIBUTIONS.c.id))
        return [
            (row[0], row[1], answer_mode(row[2]) if isinstance(row[2], dict) else None, row[3])
            for row in rows
        ]


async def blame_after(
    engine: AsyncEngine, after_id: int, *, limit: int
) -> list[tuple[int, str, str, str | None]]:
    """(id, method, agent, failure mode or None) of the ok attributions that name an agent
    and were stored after attribution `after_id`, oldest first, at most `limit` of them."""
    statement = (
        select(
            ATTRIBUTIONS.c.id, ATTRIBUTIONS.c.method, ATTRIBUTIONS.c.agent, ATTRIBUTIONS.c.payload
        )
        .where(
            ATTRIBUTIONS.c.id > after_id,
            ATTRIBUTIONS.c.status == "ok",
            ATTRIBUTIONS.c.agent.is_not(None),
        )
        .order_by(ATTRIBUTIONS.c.id)
        .limit(limit)
    )
    async with engine.connect() as conn:
        rows = await conn.execute(statement)
        return [
            (row[0], row[1], row[2], answer_mode(row[3]) if isinstance(row[3], dict) else None)
            for row in rows
        ]
