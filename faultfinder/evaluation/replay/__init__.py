"""`faultfinder bench replay`: benchmark trajectories turned into real OpenTelemetry spans and
exported over OTLP (http/protobuf, http/json or gRPC), one trace per record.

`spans` turns a trajectory into spans, `exporters` builds the OTLP exporters, `sending`
replays records through one, `command` is the command line.
"""

from faultfinder.evaluation.replay.command import replay_command
from faultfinder.evaluation.replay.exporters import (
    DEFAULT_GRPC_PORT,
    DeliveryCount,
    OTLPJsonSpanExporter,
    Protocol,
    build_exporter,
    grpc_target,
    parse_headers,
)
from faultfinder.evaluation.replay.sending import (
    REPLAY_SERVICE_NAME,
    ReplayResult,
    replay,
    replay_records,
)
from faultfinder.evaluation.replay.spans import (
    STEP_NS,
    output_messages,
    step_attributes,
    trajectory_spans,
)

__all__ = [
    "DEFAULT_GRPC_PORT",
    "REPLAY_SERVICE_NAME",
    "STEP_NS",
    "DeliveryCount",
    "OTLPJsonSpanExporter",
    "Protocol",
    "ReplayResult",
    "build_exporter",
    "grpc_target",
    "output_messages",
    "parse_headers",
    "replay",
    "replay_command",
    "replay_records",
    "step_attributes",
    "trajectory_spans",
]
