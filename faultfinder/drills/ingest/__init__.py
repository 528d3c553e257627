"""`faultfinder bench ingest`: load-test an OTLP/HTTP receiver with pre-encoded agent traces and
report accepted and durable throughput, latency, backpressure and memory.

`load` sends and measures, `server_figures` reads the server's own figures (stored
spans, ingest histograms, memory), `report` holds and prints the result, `command` is the
command line.
"""

from faultfinder.drills.ingest.command import ingest_command
from faultfinder.drills.ingest.load import SendOptions, Verify, ingest, run_ingest
from faultfinder.drills.ingest.report import (
    IngestReport,
    StageTimes,
    percentile,
    report_lines,
)
from faultfinder.drills.ingest.server_figures import (
    METRICS_PATH,
    SERVER_STAGES,
    STATS_INGEST_PATH,
    process_memory_kb,
)

__all__ = [
    "METRICS_PATH",
    "SERVER_STAGES",
    "STATS_INGEST_PATH",
    "IngestReport",
    "SendOptions",
    "StageTimes",
    "Verify",
    "ingest",
    "ingest_command",
    "percentile",
    "process_memory_kb",
    "report_lines",
    "run_ingest",
]
