"""Span store write speed: durable spans per second on SQLite and PostgreSQL.

    python -m faultfinder.drills.store_speed --spans 50000 --batch 100 --batch 1000

Writes synthetic multi-agent runs (LLM and tool spans with message-sized attributes)
through `SpanStore.write_spans`, one transaction per batch, into a fresh SQLite file
and a fresh, afterwards dropped PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy.engine import make_url

from faultfinder import conventions as c
from faultfinder.reading.model import SpanEvent, SpanRecord, StatusCode
from faultfinder.server.composition import span_store_for
from faultfinder.server.db.engine import create_engine
from faultfinder.server.db.migrate import upgrade
from faultfinder.server.progress import Progress

SPANS_PER_RUN = 20
AGENTS = ("planner", "coder", "reviewer", "executor")


def synthetic_spans(n_spans: int, seed: str) -> Iterator[SpanRecord]:
    """Runs of SPANS_PER_RUN spans: one root, then agent LLM/tool spans under it."""
    text = "The agent considers the task and writes a detailed answer. " * 8
    start = time.time_ns()
    for index in range(n_spans):
        run, position = divmod(index, SPANS_PER_RUN)
        trace_id = f"{seed}{run:024x}"[-32:]
        span_id = f"{index:016x}"
        begin = start + position * 1_000_000
        agent = AGENTS[position % len(AGENTS)]
        is_root = position == 0
        yield SpanRecord(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=None if is_root else f"{run * SPANS_PER_RUN:016x}",
            name="invoke_agent crew" if is_root else f"chat {agent}",
            start_time_unix_nano=begin,
            end_time_unix_nano=begin + 900_000,
            kind=1,
            status_code=StatusCode.OK,
            attributes={
                c.GEN_AI_AGENT_NAME: agent,
                c.GEN_AI_OPERATION_NAME: "chat",
                c.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
                c.GEN_AI_USAGE_INPUT_TOKENS: 812,
                c.GEN_AI_USAGE_OUTPUT_TOKENS: 164,
                c.GEN_AI_INPUT_MESSAGES: f'[{{"role": "user", "content": "{text}"}}]',
                c.GEN_AI_OUTPUT_MESSAGES: f'[{{"role": "assistant", "content": "{text}"}}]',
            },
            events=(SpanEvent("gen_ai.choice", begin + 800_000, {"index": 0}),),
            resource_attributes={
                "service.name": "bench-agents",
                "telemetry.sdk.language": "python",
            },
            scope_name="faultfinder.sdk",
        )


async def measure(database_url: str, n_spans: int, batch: int, progress: Progress) -> float:
    """Spans per second written durably through one store into `database_url`."""
    upgrade(database_url, show_progress=False)
    engine = create_engine(database_url)
    store = span_store_for(engine)
    spans = list(synthetic_spans(n_spans, uuid.uuid4().hex))
    name = make_url(database_url).get_backend_name()
    task = progress.add_task(f"{name} batch {batch}", total=n_spans)
    try:
        started = time.perf_counter()
        for offset in range(0, n_spans, batch):
            chunk = spans[offset : offset + batch]
            await store.write_spans(chunk)
            progress.advance(task, len(chunk))
        elapsed = time.perf_counter() - started
        stored = await store.count_spans()
        if stored != n_spans:
            raise RuntimeError(f"{name}: stored {stored} spans, expected {n_spans}")
    finally:
        await store.aclose()
        await engine.dispose()
    return n_spans / elapsed


async def _postgres_admin(admin_url: str, sql: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(admin_url, timeout=5)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


@click.command()
@click.option(
    "--spans", "n_spans", default=50_000, show_default=True, help="Spans per measurement."
)
@click.option(
    "--batch",
    "batches",
    multiple=True,
    type=int,
    default=(100, 500, 2000),
    show_default=True,
    help="Spans per write call (repeatable).",
)
@click.option(
    "--postgres-url",
    default=os.environ.get(
        "FAULTFINDER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
    ),
    show_default=True,
    help="An existing PostgreSQL database used to create and drop the benchmark database.",
)
@click.option("--no-postgres", is_flag=True, help="Measure SQLite only.")
def main(n_spans: int, batches: tuple[int, ...], postgres_url: str, no_postgres: bool) -> None:
    """Print durable spans/s of the span store for SQLite and PostgreSQL."""
    console = Console()
    results: list[tuple[str, int, float]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress,
    ):
        for batch in batches:
            path = Path(tmp) / f"bench-{batch}.db"
            sqlite_url = f"sqlite+aiosqlite:///{path}"
            rate = asyncio.run(measure(sqlite_url, n_spans, batch, progress))
            results.append(("sqlite", batch, rate))
        if not no_postgres:
            for batch in batches:
                name = f"faultfinder_bench_{uuid.uuid4().hex[:12]}"
                asyncio.run(_postgres_admin(postgres_url, f'CREATE DATABASE "{name}"'))
                url = make_url(postgres_url).set(drivername="postgresql+asyncpg", database=name)
                try:
                    rate = asyncio.run(
                        measure(url.render_as_string(hide_password=False), n_spans, batch, progress)
                    )
                finally:
                    asyncio.run(
                        _postgres_admin(
                            postgres_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
                        )
                    )
                results.append(("postgresql", batch, rate))
    table = Table(title=f"span store: {n_spans:,} spans, {SPANS_PER_RUN} per run")
    table.add_column("database")
    table.add_column("batch", justify="right")
    table.add_column("spans/s", justify="right")
    for database, batch, rate in results:
        table.add_row(database, str(batch), f"{rate:,.0f}")
    console.print(table)


if __name__ == "__main__":
    main()
