"""The `faultfinder` command line: the sidecar, its database, the benchmarks, training,
failure injection and the local model."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

import click

from faultfinder import __version__
from faultfinder.cli.lazy import LazyGroup

if TYPE_CHECKING:
    from faultfinder.server.settings import Settings


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    lazy={
        "bench": (
            "faultfinder.cli.bench:bench",
            "Benchmarks: score attributors, replay datasets through OTLP, measure ingest.",
        ),
        "dataset": (
            "faultfinder.cli.dataset:dataset_group",
            "Labelled runs in the generic format: convert datasets, export a sidecar's labels.",
        ),
        "inject": (
            "faultfinder.cli.inject:inject_group",
            "Labelled failures from your own successful runs (controlled failure injection).",
        ),
        "verify": (
            "faultfinder.injection.verify_command:verify_command",
            "Test an attribution: replay the failed run's exact prefix with a candidate step"
            " corrected, let the agents continue live, and grade the answer.",
        ),
        "train": (
            "faultfinder.training.command:train_command",
            "Train the `learned` attributor's step model and write it as JSON.",
        ),
        "llm": (
            "faultfinder.cli.llm:llm_group",
            "A local model for the LLM attributors and agents"
            " (llama.cpp, models from PyPI wheels).",
        ),
    },
)
@click.version_option(__version__, prog_name="faultfinder")
def main() -> None:
    """faultfinder: who failed, when, and why — failure attribution for LLM agents."""


def _settings(**overrides: object) -> Settings:
    # Imported here so that `faultfinder --help` does not load pydantic.
    from faultfinder.server.settings import SettingsError, load_settings

    try:
        return load_settings(**overrides)
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None


@main.command()
@click.option("--host", help="Bind address (FAULTFINDER_HOST, default 127.0.0.1).")
@click.option(
    "--port", type=int, help="HTTP port for OTLP/HTTP, API and UI (FAULTFINDER_PORT, default 4318)."
)
@click.option("--grpc-port", type=int, help="OTLP/gRPC port (FAULTFINDER_GRPC_PORT, default 4317).")
@click.option("--no-grpc", is_flag=True, default=None, help="Do not serve OTLP/gRPC.")
@click.option("--database-url", help="SQLAlchemy async URL (FAULTFINDER_DATABASE_URL).")
@click.option("--quiet-period", type=float, help="Seconds of silence before a run is complete.")
@click.option(
    "--attributors",
    help="Attributors run on every failed run, in order, comma-separated "
    "(FAULTFINDER_ATTRIBUTORS, default learned,first_error).",
)
@click.option(
    "--ingest-queue-spans",
    type=int,
    help="Spans that may wait for the writer before ingest answers 503 "
    "(FAULTFINDER_INGEST_QUEUE_SPANS, default 50000).",
)
@click.option(
    "--ingest-inflight-bytes",
    type=int,
    help="Request bytes being received and decoded at once before ingest answers 503 "
    "(FAULTFINDER_INGEST_INFLIGHT_BYTES, default 64 MiB).",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1, max=64),
    help="Processes to run on (FAULTFINDER_PROCESSES; default 2 on two cores or more, else "
    "1). From 2 the online auditor runs in its own process and any further ones decode "
    "OTLP/HTTP bodies; one span writer whatever the number.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
def serve(
    host: str | None,
    port: int | None,
    grpc_port: int | None,
    no_grpc: bool | None,
    database_url: str | None,
    quiet_period: float | None,
    attributors: str | None,
    ingest_queue_spans: int | None,
    ingest_inflight_bytes: int | None,
    processes: int | None,
    log_level: str,
) -> None:
    """Run the sidecar: OTLP receivers, query API and the run lifecycle."""
    import uvicorn

    from faultfinder.server.app import create_app
    from faultfinder.server.banner import startup_banner
    from faultfinder.server.http_connections import guarded_protocol
    from faultfinder.server.logs import configure_logging
    from faultfinder.server.memory import return_large_buffers
    from faultfinder.server.settings import SettingsError

    return_large_buffers()  # before any thread starts: request bodies are large
    settings = _settings(
        host=host,
        port=port,
        grpc_port=grpc_port,
        grpc_enabled=False if no_grpc else None,
        database_url=database_url,
        quiet_period=quiet_period,
        attributors=attributors,
        ingest_queue_spans=ingest_queue_spans,
        ingest_inflight_bytes=ingest_inflight_bytes,
        processes=processes,
    )
    configure_logging(log_level)
    try:
        app = create_app(settings)  # loads the plugins, so the banner knows their attributors
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(startup_banner(settings, __version__), err=True)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        loop="asyncio",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=30,
        timeout_keep_alive=settings.keep_alive,
        http=guarded_protocol(settings.head_timeout, settings.max_connections_per_client),
    )


@main.group()
def db() -> None:
    """Database schema commands."""


@db.command("upgrade")
@click.option("--database-url", help="SQLAlchemy async URL (FAULTFINDER_DATABASE_URL).")
def db_upgrade(database_url: str | None) -> None:
    """Upgrade the schema to the latest revision (shows each step)."""
    from faultfinder.server.db.migrate import upgrade

    settings = _settings(database_url=database_url)
    upgrade(settings.database_url)
    click.echo(f"database {settings.database_url} is at the latest revision", err=True)


@main.command()
@click.option("--database-url", help="SQLAlchemy async URL (FAULTFINDER_DATABASE_URL).")
@click.option(
    "--concurrency",
    type=int,
    help="Jobs of attributors that ask a model at once (FAULTFINDER_WORKERS, default 1); "
    "zero-LLM ones run beside them (FAULTFINDER_FAST_WORKERS, default 1).",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@click.option(
    "--heartbeat-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Touch this file every 10 s while the workers run (for liveness/readiness probes).",
)
def worker(
    database_url: str | None, concurrency: int | None, log_level: str, heartbeat_file: Path | None
) -> None:
    """Run attribution workers only (share the job table with other workers and replicas)."""
    import asyncio

    from faultfinder.server.logs import configure_logging
    from faultfinder.server.worker_main import run_workers

    settings = _settings(database_url=database_url, workers=concurrency)
    configure_logging(log_level)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_workers(settings, heartbeat=heartbeat_file))


@main.command()
@click.option("--port", type=int, default=4318, show_default=True, help="HTTP port.")
@click.option(
    "--database-url",
    default="sqlite+aiosqlite:///faultfinder-demo.db",
    show_default=True,
    help="Where the demo keeps its runs.",
)
@click.option(
    "--records",
    type=click.IntRange(1, 184),
    default=6,
    show_default=True,
    help="Who&When failures to replay.",
)
@click.option(
    "--attributors",
    default="learned,first_error",
    show_default=True,
    help="Comma-separated attributors run on each failed run.",
)
@click.option(
    "--datasets-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="FAULTFINDER_DATASETS_DIR",
    help="Dataset root (default ../shared/datasets).",
)
@click.option(
    "--serve/--no-serve",
    default=True,
    show_default=True,
    help="Keep serving after printing the attributions.",
)
@click.option(
    "--timeout",
    type=float,
    default=600,
    show_default=True,
    help="Seconds to wait for the attributions.",
)
def demo(
    port: int,
    database_url: str,
    records: int,
    attributors: str | None,
    datasets_dir: Path | None,
    serve: bool,
    timeout: float,
) -> None:
    """Start the sidecar on SQLite, replay Who&When failures over OTLP, print who and when."""
    from faultfinder.cli.demo import demo_main

    settings = _settings(
        port=port,
        database_url=database_url,
        attributors=attributors,
        quiet_period=1.0,
        sweep_interval=0.5,
        grpc_enabled=False,
    )
    demo_main(settings, datasets_dir=datasets_dir, records=records, serve=serve, timeout=timeout)
