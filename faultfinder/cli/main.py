"""The `faultfinder` command line: the sidecar, its database and the benchmarks."""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
from typing import Any

import click

from faultfinder import __version__
from faultfinder.server.settings import Settings, SettingsError, load_settings


class LazyGroup(click.Group):
    """A group whose heavier commands are imported only when one of them runs (or its own
    help is asked for): `faultfinder --help`, `serve` and `worker` do not load the
    benchmarks, the training code or the local model's tooling."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy
        """Command name → (`module:attribute`, the one-line help shown in the listing)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            target, _ = self._lazy[cmd_name]
            module, attribute = target.split(":")
            command: click.Command = getattr(importlib.import_module(module), attribute)
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in self._lazy:
                rows.append((name, self._lazy[name][1]))
            elif (command := super().get_command(ctx, name)) is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(formatter.width - 6 - len(name))))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    lazy={
        "bench": (
            "faultfinder.benchmarks.cli:bench",
            "Benchmarks: score attributors, replay datasets through OTLP, measure ingest.",
        ),
        "dataset": (
            "faultfinder.benchmarks.dataset_cli:dataset_group",
            "Labelled runs in the generic format: convert datasets, export a sidecar's labels.",
        ),
        "inject": (
            "faultfinder.benchmarks.injection.command:inject_group",
            "Labelled failures from your own successful runs (controlled failure injection).",
        ),
        "train": (
            "faultfinder.benchmarks.train:train_command",
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
    ingest_queue_spans: int | None,
    ingest_inflight_bytes: int | None,
    processes: int | None,
    log_level: str,
) -> None:
    """Run the sidecar: OTLP receivers, query API and the run lifecycle."""
    import uvicorn

    from faultfinder.server.app import create_app
    from faultfinder.server.logs import configure_logging

    settings = _settings(
        host=host,
        port=port,
        grpc_port=grpc_port,
        grpc_enabled=False if no_grpc else None,
        database_url=database_url,
        quiet_period=quiet_period,
        ingest_queue_spans=ingest_queue_spans,
        ingest_inflight_bytes=ingest_inflight_bytes,
        processes=processes,
    )
    configure_logging(log_level)
    click.echo(
        f"faultfinder {__version__}: OTLP/HTTP + API on http://{settings.host}:{settings.port}"
        + (f", OTLP/gRPC on {settings.host}:{settings.grpc_port}" if settings.grpc_enabled else "")
        + f", database {settings.database_url}",
        err=True,
    )
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        loop="asyncio",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=30,
        timeout_keep_alive=settings.keep_alive,
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
@click.option("--concurrency", type=int, help="Jobs at once (FAULTFINDER_WORKERS, default 1).")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
def worker(database_url: str | None, concurrency: int | None, log_level: str) -> None:
    """Run attribution workers only (share the job table with other workers and replicas)."""
    import asyncio

    from faultfinder.server.logs import configure_logging
    from faultfinder.server.worker_main import run_workers

    settings = _settings(database_url=database_url, workers=concurrency)
    configure_logging(log_level)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_workers(settings))


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
