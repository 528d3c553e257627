"""`faultfinder bench replay`: the command line that replays a dataset into a receiver."""

from __future__ import annotations

import itertools

import click

from faultfinder.datasets import (
    DATASETS_DIR_ENV,
    DatasetError,
    load_dataset,
    resolve_datasets_dir,
)
from faultfinder.evaluation.replay.exporters import Protocol, parse_headers
from faultfinder.evaluation.replay.sending import replay


@click.command(name="replay")
@click.option(
    "--dataset",
    "spec",
    required=True,
    help="Dataset spec: who_and_when, who_and_when:algorithm-generated, who_and_when:hand-crafted.",
)
@click.option(
    "--to", required=True, help="Base URL of the OTLP receiver, e.g. http://127.0.0.1:4318."
)
@click.option(
    "--protocol",
    type=click.Choice([p.value for p in Protocol]),
    default=Protocol.HTTP_PROTOBUF.value,
    show_default=True,
    help="OTLP transport (gRPC takes host:port from --to).",
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Replay at most N records.")
@click.option("--project", default=None, help="Project name (resource attribute).")
@click.option("--headers", default=None, help="Extra request headers: k=v,k2=v2.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds per export, retries included.",
)
@click.option(
    "--datasets-dir",
    type=click.Path(file_okay=False, path_type=str),
    envvar=DATASETS_DIR_ENV,
    default=None,
    help=f"Dataset root (default ${DATASETS_DIR_ENV} or ../shared/datasets).",
)
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def replay_command(
    spec: str,
    to: str,
    protocol: str,
    limit: int | None,
    project: str | None,
    headers: str | None,
    timeout: float,
    datasets_dir: str | None,
    no_progress: bool,
) -> None:
    """Replay a benchmark dataset as OTLP traces (one trace per record) into a receiver."""
    try:
        extra_headers = parse_headers(headers)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--headers") from error
    try:
        records = list(
            itertools.islice(load_dataset(spec, root=resolve_datasets_dir(datasets_dir)), limit)
        )
    except DatasetError as error:
        raise click.ClickException(str(error)) from error
    if not records:
        raise click.ClickException(f"dataset {spec!r} has no records")
    try:
        result = replay(
            records,
            to=to,
            protocol=protocol,
            project=project,
            headers=extra_headers,
            progress=not no_progress,
            timeout=timeout,
        )
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--to") from error
    click.echo(
        f"replayed {result.records} records: {result.spans} spans sent, "
        f"{result.failures} export failures ({result.failed_spans} spans not delivered)"
    )
    if result.failures:
        raise SystemExit(1)
