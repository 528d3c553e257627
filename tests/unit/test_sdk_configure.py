"""Configuring the SDK (contents kept whole, flushing, the resource, exporters, endpoints and
headers), and the README's snippet and the example program recording what they say."""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import faultfinder.sdk
from faultfinder import conventions as c
from faultfinder.attributors.model import StepKind, StepStatus
from faultfinder.sdk import (
    ConfigurationError,
    configure,
    export_target,
    flush,
    message,
    run,
    shutdown,
    tool_call,
)
from tests.sdk_recording import recording, steps, trajectory

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    with recording() as (memory, _):
        yield memory


# --- configure ---------------------------------------------------------------------------------


def test_long_contents_are_not_truncated_even_when_the_environment_limits_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "64")
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "64")
    long_answer = "".join(f"line {n}: the quick brown fox\n" for n in range(5000))
    with (
        recording() as (memory, _),
        run(task=long_answer) as r,
        tool_call("read_file", {"path": "big.txt"}) as call,
    ):
        call.result(long_answer)
    got = trajectory(memory, r.run_id)
    assert got.task == long_answer
    assert got.steps[0].tool_result == long_answer


def test_flush_sends_the_batched_spans_of_a_finished_run() -> None:
    memory = InMemorySpanExporter()
    configure(exporter=memory, set_global=False)  # batched, as in production
    try:
        with run(task="t") as r:
            message("Agent", "hi")
        assert flush(timeout_seconds=10)
        assert steps(trajectory(memory, r.run_id)) == [("Agent", StepKind.MESSAGE, "hi")]
    finally:
        shutdown()


def test_the_resource_names_service_and_project(monkeypatch: pytest.MonkeyPatch) -> None:
    def resource_of(
        service_name: str | None = None, project: str | None = None
    ) -> dict[str, object]:
        provider = configure(
            exporter=InMemorySpanExporter(),
            set_global=False,
            service_name=service_name,
            project=project,
        )
        shutdown()
        return dict(provider.resource.attributes)

    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    assert resource_of()[c.SERVICE_NAME] == "agents"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    assert resource_of()[c.SERVICE_NAME] == "from-env"
    assert resource_of(service_name="from-arg")[c.SERVICE_NAME] == "from-arg"
    assert resource_of(project="checkout")[c.PROJECT_NAME] == "checkout"


def test_the_project_reaches_the_sidecars_view_of_the_run() -> None:
    with recording(project="checkout") as (memory, _), run(task="t") as r:
        message("Agent", "hi")
    assert trajectory(memory, r.run_id).metadata["project"] == "checkout"


def test_an_own_provider_gets_the_export_but_keeps_its_resource() -> None:
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    assert configure(tracer_provider=provider, exporter=memory, batch=False) is provider
    try:
        with run(task="t"):
            message("Agent", "hi")
    finally:
        shutdown()
    assert len(memory.get_finished_spans()) == 2
    with pytest.raises(ConfigurationError, match="Resource"):
        configure(tracer_provider=TracerProvider(), exporter=memory, project="p")


@pytest.fixture
def clean_otlp_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (
        "FAULTFINDER_ENDPOINT",
        "FAULTFINDER_API_KEY",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    ):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_spans_go_to_the_local_sidecar_unless_told_otherwise(
    clean_otlp_environment: pytest.MonkeyPatch,
) -> None:
    env = clean_otlp_environment
    assert export_target().endpoint == "http://127.0.0.1:4318/v1/traces"
    assert export_target(protocol="grpc").endpoint == "http://127.0.0.1:4317"
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert export_target().endpoint == "http://collector:4318/v1/traces"
    env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces.example/custom")
    assert export_target().endpoint == "https://traces.example/custom"
    env.setenv("FAULTFINDER_ENDPOINT", "http://sidecar:9000")
    assert export_target().endpoint == "http://sidecar:9000/v1/traces"
    assert export_target("http://arg:1/v1/traces").endpoint == "http://arg:1/v1/traces"
    assert export_target("127.0.0.1:4317", protocol="grpc").endpoint == "http://127.0.0.1:4317"


def test_headers_come_from_the_argument_or_the_environment(
    clean_otlp_environment: pytest.MonkeyPatch,
) -> None:
    env = clean_otlp_environment
    assert export_target().headers == {}
    env.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-project-name=demo,authorization=Bearer%20k1")
    assert export_target().headers == {"x-project-name": "demo", "authorization": "Bearer k1"}
    env.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-project-name=traces")
    env.setenv("FAULTFINDER_API_KEY", "k2")
    assert export_target().headers == {"x-project-name": "traces", "authorization": "Bearer k2"}
    assert export_target(headers={"x-team": "a"}).headers == {"x-team": "a"}


def test_unusable_protocols_and_endpoints_are_refused_naming_their_source(
    clean_otlp_environment: pytest.MonkeyPatch,
) -> None:
    env = clean_otlp_environment
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ConfigurationError, match=r"OTEL_EXPORTER_OTLP_PROTOCOL.*http/json"):
        export_target()
    assert export_target(protocol="grpc").protocol == "grpc"
    env.delenv("OTEL_EXPORTER_OTLP_PROTOCOL")
    env.setenv("FAULTFINDER_ENDPOINT", "sidecar:4318")
    with pytest.raises(ConfigurationError, match=r"FAULTFINDER_ENDPOINT.*sidecar:4318"):
        configure()
    with pytest.raises(ConfigurationError, match="endpoint argument"):
        export_target("ftp://x")


def test_step_kinds_written_by_the_sdk_are_the_servers_step_kinds() -> None:
    kinds = {
        c.STEP_KIND_MESSAGE,
        c.STEP_KIND_LLM,
        c.STEP_KIND_TOOL,
        c.STEP_KIND_HANDOFF,
        c.STEP_KIND_HUMAN,
        c.STEP_KIND_SYSTEM,
    }
    assert kinds == {kind.value for kind in StepKind}


# --- the documented snippet and the example program ----------------------------------------


def python_blocks(markdown: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown.read_text(), flags=re.DOTALL)


def test_the_instrument_snippet_in_the_readme_records_the_run_it_describes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memory = InMemorySpanExporter()
    # The snippet's own configure() call, with its spans kept in memory instead of sent.
    monkeypatch.setattr(
        faultfinder.sdk,
        "configure",
        functools.partial(configure, exporter=memory, batch=False, set_global=False),
    )
    snippet = python_blocks(ROOT / "README.md")[0]
    assert len(snippet.strip().splitlines()) <= 12, "the README snippet should stay short"
    namespace: dict[str, object] = {}
    exec(compile(snippet, "README.md", "exec"), namespace)

    r = namespace["r"]
    assert isinstance(r, faultfinder.sdk.Run)
    got = trajectory(memory, r.run_id)
    assert [(step.agent, step.kind) for step in got.steps] == [
        ("Planner", StepKind.MESSAGE),
        ("Searcher", StepKind.TOOL),
        ("Planner", StepKind.MESSAGE),
    ]
    assert "AF 1024" in got.steps[2].content
    assert "TP 433" in (got.steps[1].tool_result or "")
    assert got.metadata["project"] == "demo"
    assert got.metadata["outcome"] == "failure" and got.final_answer == "AF 1024"


def load_example() -> ModuleType:
    path = ROOT / "examples" / "multi_agent_sdk.py"
    spec = importlib.util.spec_from_file_location("multi_agent_sdk_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_team_records_its_mistake_where_it_happens(
    exporter: InMemorySpanExporter,
) -> None:
    example = load_example()
    finished = example.solve()
    got = trajectory(exporter, finished.run_id)

    assert got.agents == ("Orchestrator", "PriceLookup", "Calculator")
    assert got.task == example.TASK and got.ground_truth == "19.08 EUR"
    assert got.final_answer == "18.60 EUR"
    assert got.metadata["outcome"] == "failure"
    kinds = [(step.agent, step.kind) for step in got.steps]
    assert kinds[:2] == [("Orchestrator", StepKind.MESSAGE), ("Orchestrator", StepKind.HANDOFF)]
    failed_tools = [step for step in got.steps if step.status is StepStatus.ERROR]
    assert [(s.agent, s.tool_name) for s in failed_tools] == [("PriceLookup", "catalog.lookup")]
    assert "CatalogError" in (failed_tools[0].error or "")
    guess = got.steps[failed_tools[0].index + 1]
    assert (guess.agent, guess.kind) == ("PriceLookup", StepKind.MESSAGE)
    assert "1.00 EUR" in guess.content
    assert got.steps[-1].agent == "Orchestrator" and "18.60" in got.steps[-1].content
