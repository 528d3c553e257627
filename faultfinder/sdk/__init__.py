"""The agent-side SDK: record runs as OpenTelemetry spans for the sidecar, then query it.

Light by design: it needs only the OpenTelemetry API/SDK/OTLP exporter and httpx, never
the server's dependencies, so it can be installed beside any agent framework.
"""

from faultfinder.sdk.async_client import AsyncClient
from faultfinder.sdk.client import Client
from faultfinder.sdk.decorators import agent, tool
from faultfinder.sdk.errors import (
    APIError,
    AuthError,
    ConfigurationError,
    FaultfinderError,
    NotFoundError,
    ResponseError,
    ServerBusyError,
    TransportError,
    ValidationError,
    WaitTimeoutError,
)
from faultfinder.sdk.export import ExportTarget, export_target
from faultfinder.sdk.models import (
    FINISHED_STATUSES,
    RUN_STATUSES,
    Attribution,
    AttributionJob,
    AttributorAccuracy,
    BlameBucket,
    Candidate,
    IngestStats,
    Label,
    PredictionSet,
    RunDetail,
    RunSummary,
    Stats,
    Step,
    Trajectory,
)
from faultfinder.sdk.provider import configure, flush, shutdown
from faultfinder.sdk.runs import Run, current_run, run
from faultfinder.sdk.steps import (
    AgentStep,
    ToolCall,
    agent_step,
    current_step,
    handoff,
    message,
    tool_call,
)

__all__ = [
    "FINISHED_STATUSES",
    "RUN_STATUSES",
    "APIError",
    "AgentStep",
    "AsyncClient",
    "Attribution",
    "AttributionJob",
    "AttributorAccuracy",
    "AuthError",
    "BlameBucket",
    "Candidate",
    "Client",
    "ConfigurationError",
    "ExportTarget",
    "FaultfinderError",
    "IngestStats",
    "Label",
    "NotFoundError",
    "PredictionSet",
    "ResponseError",
    "Run",
    "RunDetail",
    "RunSummary",
    "ServerBusyError",
    "Stats",
    "Step",
    "ToolCall",
    "Trajectory",
    "TransportError",
    "ValidationError",
    "WaitTimeoutError",
    "agent",
    "agent_step",
    "configure",
    "current_run",
    "current_step",
    "export_target",
    "flush",
    "handoff",
    "message",
    "run",
    "shutdown",
    "tool",
    "tool_call",
]
