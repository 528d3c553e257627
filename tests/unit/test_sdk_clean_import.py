"""The SDK stays light: importing and configuring it loads none of the server's dependencies."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import faultfinder.sdk as sdk

SERVER_ONLY = [
    "litestar",
    "sqlmodel",
    "sqlalchemy",
    "alembic",
    "openai",
    "pydantic",
    "pydantic_settings",
    "faultfinder.server",
    "faultfinder.attributors",
    "faultfinder.evaluation",
    "faultfinder.training",
    "faultfinder.datasets",
    "faultfinder.injection",
    "faultfinder.drills",
]


def test_importing_and_using_the_sdk_loads_no_server_dependency() -> None:
    program = textwrap.dedent(
        """
        import json, sys
        import faultfinder.sdk as sdk
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        # Configure the real OTLP exporter (nothing is sent: no span is recorded with it).
        sdk.configure("http://127.0.0.1:9", set_global=False)
        sdk.shutdown()
        sdk.configure(exporter=InMemorySpanExporter(), batch=False, set_global=False)
        with sdk.run(task="t") as r, sdk.agent_step("A") as step:
            step.say("hi")
        sdk.shutdown()
        sdk.Client("http://127.0.0.1:9").close()
        print(json.dumps(sorted(sys.modules)))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    loaded = set(json.loads(result.stdout.strip().splitlines()[-1]))
    assert "faultfinder.sdk" in loaded and "httpx" in loaded
    leaked = sorted(
        module
        for module in loaded
        for forbidden in SERVER_ONLY
        if module == forbidden or module.startswith(forbidden + ".")
    )
    assert leaked == []


def test_the_public_surface_is_pinned() -> None:
    assert sorted(sdk.__all__) == [
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
        "FINISHED_STATUSES",
        "FaultfinderError",
        "IngestStats",
        "Label",
        "NotFoundError",
        "PredictionSet",
        "RUN_STATUSES",
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
    for name in sdk.__all__:
        assert hasattr(sdk, name), name


def test_every_sdk_error_is_a_faultfinder_error() -> None:
    for name in sdk.__all__:
        value = getattr(sdk, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, sdk.FaultfinderError), name
    for specific in (sdk.AuthError, sdk.NotFoundError, sdk.ValidationError, sdk.ServerBusyError):
        assert issubclass(specific, sdk.APIError)
