"""What every hostile drill of `faultfinder bench chaos --hostile` is given and fills: the
sizes of the run (`HostileScale`), a fresh database and sidecar per drill (`DrillContext`)
and the `Finding` it reports."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from faultfinder.evaluation.sidecar import SidecarProcess, free_port

__all__ = [
    "FULL",
    "MIB",
    "QUICK",
    "Drill",
    "DrillContext",
    "Finding",
    "HostileScale",
    "database_label",
    "fresh_database",
    "postgres_admin",
]

MIB = 1024 * 1024


@dataclass(frozen=True)
class HostileScale:
    """Sizes and limits of one hostile run: the issue's sizes against the sidecar's
    default limits (`FULL`), or both cut down so that a test runs the drills in seconds
    (`QUICK`)."""

    quick: bool = False
    max_spans_per_request: int = 20_000
    max_spans_per_run: int = 20_000
    max_attribution_steps: int = 10_000
    max_decompressed_bytes: int = 64 * MIB
    inflight_bytes: int = 64 * MIB
    body_read_timeout: float = 10.0
    """FAULTFINDER_BODY_READ_TIMEOUT of the upload drills (3 and 4); the default is 30 s."""
    ack_timeout: float | None = None
    """FAULTFINDER_INGEST_ACK_TIMEOUT of the database drills (2 and 7); None: the default."""
    huge_body_spans: int = 559_204
    """Spans of the issue's 16 MiB body."""
    flood_requests: int = 15
    uploads: int = 100
    upload_mib: int = 16
    slow_senders: int = 4
    large_run_requests: int = 5
    attribute_steps: tuple[int, ...] = (50_000, 10_000)
    malformed_grpc: int = 20
    retrying_requests: int = 20
    """Requests (of one 6-span run each) the retrying sender of drills 2 and 7 sends."""
    rss_limit_mb: float = 1024.0
    """A phase whose peak RSS passes this has not held (the issue saw 3.4 GB and more)."""
    rss_growth_limit_mb: float = 512.0
    """Growth of RSS over rest that the unfinished uploads may cause (the issue saw
    1.5 GB)."""
    stall_limit_s: float = 1.0
    """Ingest latency that counts as a stall (the issue saw 5.5–33 s)."""

    def limits_env(self) -> dict[str, str]:
        """The limits as the sidecar's environment."""
        return {
            "FAULTFINDER_MAX_SPANS_PER_REQUEST": str(self.max_spans_per_request),
            "FAULTFINDER_MAX_SPANS_PER_RUN": str(self.max_spans_per_run),
            "FAULTFINDER_MAX_ATTRIBUTION_STEPS": str(self.max_attribution_steps),
            "FAULTFINDER_MAX_DECOMPRESSED_BYTES": str(self.max_decompressed_bytes),
            "FAULTFINDER_INGEST_INFLIGHT_BYTES": str(self.inflight_bytes),
        }


FULL = HostileScale()
QUICK = replace(
    FULL,
    quick=True,
    max_spans_per_request=2_000,
    max_spans_per_run=2_000,
    max_attribution_steps=1_000,
    max_decompressed_bytes=4 * MIB,
    inflight_bytes=4 * MIB,
    body_read_timeout=2.0,
    ack_timeout=3.0,
    huge_body_spans=50_000,
    flood_requests=3,
    uploads=8,
    upload_mib=2,
    large_run_requests=3,
    attribute_steps=(5_000, 1_000),
    malformed_grpc=5,
    retrying_requests=6,
)


@dataclass
class Finding:
    """What one drill measured on one database, and whether the issue's fix held."""

    item: int
    title: str
    database: str
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)
    checks: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None
    seconds: float = 0.0

    def add(self, probe: str, **measures: Any) -> None:
        """Record measures of `probe` (merged with those already recorded)."""
        self.figures.setdefault(probe, {}).update(measures)

    def check(self, name: str, holds: bool) -> bool:
        self.checks[name] = bool(holds)
        return bool(holds)

    @property
    def holds(self) -> bool | None:
        """Every check held and nothing failed; None when the drill was not run."""
        if self.skipped is not None:
            return None
        return self.error is None and bool(self.checks) and all(self.checks.values())

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "holds": self.holds}


@dataclass
class DrillContext:
    """What a drill is given: a database server to make fresh databases on, a folder of
    its own, the sizes, and a way to say what it is doing."""

    database_url: str
    workdir: Path
    scale: HostileScale
    say: Callable[[str], None]

    @property
    def dialect(self) -> str:
        return make_url(self.database_url).get_backend_name()

    @contextlib.contextmanager
    def database(self, name: str) -> Iterator[str]:
        """A new empty database for this drill (see `fresh_database`)."""
        with fresh_database(self.database_url, self.workdir, name) as url:
            yield url

    @contextlib.contextmanager
    def sidecar(
        self, database_url: str, env: Mapping[str, str] | None = None, *, grpc: bool = False
    ) -> Iterator[SidecarProcess]:
        """A `faultfinder serve` on `database_url` (with OTLP/gRPC on a free port if
        `grpc`), stopped at exit."""
        process = SidecarProcess(
            database_url,
            self.workdir,
            env=dict(env or {}),
            grpc_port=free_port() if grpc else None,
        )
        with process:
            yield process


def postgres_admin(database_url: str, *statements: str) -> None:
    """Run `statements` on the PostgreSQL database of `database_url` (autocommit)."""

    async def run() -> None:
        url = make_url(database_url).set(drivername="postgresql")
        connection = await asyncpg.connect(url.render_as_string(hide_password=False), timeout=10)
        try:
            for statement in statements:
                await connection.execute(statement)
        finally:
            await connection.close()

    asyncio.run(run())


@contextlib.contextmanager
def fresh_database(database_url: str, workdir: Path, name: str) -> Iterator[str]:
    """A new empty database of the kind `database_url` names: a SQLite file in `workdir`,
    or a PostgreSQL database created beside `database_url`'s (which is never written to)
    and dropped at exit."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        path = workdir / f"{name}.db"
        for stale in workdir.glob(f"{name}.db*"):
            stale.unlink()
        yield f"sqlite+aiosqlite:///{path}"
        return
    scratch = f"faultfinder_hostile_{name}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    postgres_admin(database_url, f'CREATE DATABASE "{scratch}"')
    try:
        yield url.set(drivername="postgresql+asyncpg", database=scratch).render_as_string(
            hide_password=False
        )
    finally:
        postgres_admin(database_url, f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')


def database_label(database_url: str) -> str:
    """What a finding says it ran on: `SQLite`, or the PostgreSQL server's URL (the drills
    make their own databases there)."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        return "SQLite"
    return f"PostgreSQL {url.host}:{url.port or 5432}"


Drill = Callable[[DrillContext, Finding], None]
