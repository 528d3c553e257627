"""`faultfinder bench ingest`: the command line of the ingest benchmark."""

from __future__ import annotations

import dataclasses
import json
import sys

import click

from faultfinder.drills.ingest.load import Verify, ingest
from faultfinder.drills.ingest.report import report_lines
from faultfinder.drills.ingest.server_figures import STATS_INGEST_PATH
from faultfinder.drills.otlp_traces import BodyFormat
from faultfinder.evaluation.replay.exporters import parse_headers


@click.command(name="ingest")
@click.option(
    "--to", required=True, help="Base URL of the OTLP/HTTP server, e.g. http://127.0.0.1:6006."
)
@click.option("--spans", type=click.IntRange(min=1), required=True, help="Spans to send in total.")
@click.option(
    "--concurrency", type=click.IntRange(min=1), default=8, show_default=True, help="Connections."
)
@click.option(
    "--batch", type=click.IntRange(min=1), default=100, show_default=True, help="Spans per request."
)
@click.option(
    "--format",
    "body_format",
    type=click.Choice([f.value for f in BodyFormat]),
    default=BodyFormat.PROTOBUF.value,
    show_default=True,
)
@click.option("--gzip", is_flag=True, help="gzip request bodies (Content-Encoding: gzip).")
@click.option("--project", default=None, help="Project name (resource attribute).")
@click.option(
    "--verify",
    type=click.Choice([v.value for v in Verify]),
    default=Verify.FAULTFINDER.value,
    show_default=True,
    help=f"faultfinder: poll {STATS_INGEST_PATH} until every span is stored; "
    "none: trust 2xx (any OTLP server).",
)
@click.option("--server-pid", type=int, default=None, help="Report this process's peak RSS.")
@click.option("--headers", default=None, help="Extra request headers: k=v,k2=v2.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds per request.",
)
@click.option(
    "--settle-timeout",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="With --verify faultfinder: give up once the stored count has not grown for this long.",
)
@click.option(
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Offer a fixed load of this many spans/s (open loop: requests are sent when due, "
    "answered or not, and latency counts from when each was due). Default: each "
    "connection sends as soon as its last request is answered (the capacity).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def ingest_command(
    to: str,
    spans: int,
    concurrency: int,
    batch: int,
    body_format: str,
    gzip: bool,
    project: str | None,
    verify: str,
    server_pid: int | None,
    headers: str | None,
    timeout: float,
    settle_timeout: float,
    rate: float | None,
    as_json: bool,
    no_progress: bool,
) -> None:
    """Load-test OTLP/HTTP ingest with realistic multi-agent traces (≈2.5 KB per span).

    Request bodies are built in memory before the clock starts, so the figures measure
    the server, not the client's encoding.
    """
    try:
        extra_headers = parse_headers(headers)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--headers") from error
    report = ingest(
        to,
        spans,
        concurrency=concurrency,
        batch=batch,
        body_format=body_format,
        gzip=gzip,
        project=project,
        verify=verify,
        timeout=timeout,
        settle_timeout=settle_timeout,
        headers=extra_headers,
        server_pid=server_pid,
        rate=rate,
        progress=not no_progress,
    )
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(report), indent=2))
    else:
        for line in report_lines(report):
            click.echo(line)
    if not report.ok:
        sys.exit(1)
