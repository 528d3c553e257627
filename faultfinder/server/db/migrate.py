"""Upgrade the span store's schema with Alembic, reporting each revision as it is applied.

`upgrade(database_url)` is a plain function: call it from sync code, or from async
code directly or through `asyncio.to_thread` — it runs Alembic on its own event loop
(in a worker thread when the caller's thread already runs one).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext, MigrationInfo
from alembic.script import ScriptDirectory
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from sqlalchemy import text
from sqlalchemy.engine import URL, Connection

from faultfinder.server.db.engine import create_engine, database_url
from faultfinder.server.progress import Progress

log = logging.getLogger(__name__)


def summary(docstring: str | None) -> str:
    """A revision's docstring as one log-friendly line: its first paragraph, unwrapped."""
    return " ".join((docstring or "").strip().split("\n\n", 1)[0].split())


ALEMBIC_INI = Path(__file__).with_name("alembic.ini")
MIGRATIONS_DIR = Path(__file__).with_name("migrations")

# Replicas starting together against one PostgreSQL take turns: the first upgrades,
# the others then find the schema current. Any fixed 64-bit number works as the key.
_PG_MIGRATION_LOCK = 0x66_61_75_6C_74_66_64  # "faultfd"


@dataclass(frozen=True, slots=True)
class AppliedRevision:
    """One revision applied by `upgrade`."""

    revision: str
    description: str
    seconds: float


def alembic_config(url: str | URL | None = None) -> Config:
    """The Alembic `Config` of the span store (script location resolved to this package)."""
    config = Config(str(ALEMBIC_INI))
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        rendered = database_url(url).render_as_string(hide_password=False)
        # ConfigParser treats % as interpolation; URL-encoded passwords contain it.
        config.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return config


def _pending_revisions(config: Config, connection: Connection, target: str) -> list[str]:
    script = ScriptDirectory.from_config(config)
    current = MigrationContext.configure(connection).get_current_heads()
    lower: str | tuple[str, ...] = current or "base"
    revisions = list(script.iterate_revisions(target, lower))
    return [revision.revision for revision in reversed(revisions)]


def _upgrade_on_connection(
    connection: Connection,
    config: Config,
    target: str,
    start: Callable[[int], None],
    report: Callable[[AppliedRevision], None],
) -> list[AppliedRevision]:
    pending = _pending_revisions(config, connection, target)
    applied: list[AppliedRevision] = []
    start(len(pending))
    if not pending:
        return applied
    started = time.perf_counter()

    def on_version_apply(*, step: MigrationInfo, **_: Any) -> None:
        nonlocal started
        now = time.perf_counter()
        revision = step.up_revision_id or "base"
        # Revisions loaded from scripts carry the module docstring as `doc`.
        done = AppliedRevision(
            revision, summary(getattr(step.up_revision, "doc", None)), now - started
        )
        started = now
        applied.append(done)
        report(done)

    config.attributes["connection"] = connection
    config.attributes["on_version_apply"] = on_version_apply
    command.upgrade(config, target)
    return applied


async def _upgrade(
    url: URL, target: str, report: Callable[[AppliedRevision], None], start: Callable[[int], None]
) -> list[AppliedRevision]:
    config = alembic_config(url)
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            if connection.dialect.name == "postgresql":
                # Held until commit, so concurrent upgrades run one after the other.
                await connection.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK}
                )
            applied: list[AppliedRevision] = await connection.run_sync(
                _upgrade_on_connection, config, target, start, report
            )
            await connection.commit()
            return applied
    finally:
        await engine.dispose()


def upgrade(
    database_url_: str | URL, *, revision: str = "head", show_progress: bool = True
) -> list[AppliedRevision]:
    """Upgrade the schema at `database_url_` to `revision` (default: the latest).

    Logs each applied revision and, with `show_progress`, shows a progress bar on
    stderr. Returns the revisions applied (empty when the schema was current).
    Raises `DatabaseURLError` for an unusable URL; database errors propagate.
    """
    url = database_url(database_url_)
    where = url.render_as_string(hide_password=True)
    # Each applied revision is logged here on one line; Alembic's own INFO lines repeat
    # them (a docstring's line breaks escaped as a literal `\n`) and list its plugins. Set
    # on each call: a logging configuration applied since may have reset the level.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    console = Console(stderr=True)
    progress = Progress(
        TextColumn("[bold]migrating database"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not show_progress,
    )
    task = progress.add_task("migrate", total=None)
    started: list[bool] = []

    def start(n_pending: int) -> None:
        if n_pending:
            log.info("database %s: %d revision(s) to apply", where, n_pending)
            progress.update(task, total=n_pending)
            progress.start()
            started.append(True)

    def report(done: AppliedRevision) -> None:
        log.info(
            "database %s: applied revision %s (%s) in %.2fs",
            where,
            done.revision,
            done.description,
            done.seconds,
        )
        if show_progress:
            progress.console.print(
                f"applied revision {done.revision} ({done.description}) in {done.seconds:.2f}s"
            )
        progress.advance(task)

    applied: list[AppliedRevision]
    try:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            applied = asyncio.run(_upgrade(url, revision, report, start))
        else:
            # This thread already runs an event loop; Alembic gets its own in a worker thread.
            with ThreadPoolExecutor(1, thread_name_prefix="faultfinder-migrate") as pool:
                future = pool.submit(asyncio.run, _upgrade(url, revision, report, start))
                applied = future.result()
    finally:
        if started:
            progress.stop()
    if not applied:
        log.info("database %s: schema is current", where)
    return applied
