"""pydantic-ai's own OpenTelemetry instrumentation against a real sidecar and a real local
model: its spans are assembled into the trajectory its agents went through, and failed runs
are attributed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent, InstrumentationSettings, ModelSettings, RunContext, ToolOutput
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.profiles.openai import OpenAIModelProfile
from pydantic_ai.providers.openai import OpenAIProvider

from faultfinder.attributors.local_server import (
    LocalModelServer,
)
from faultfinder.sdk import Client, RunDetail, configure, shutdown
from tests.integration.sidecar import Sidecar, quick_sidecar
from tests.llm_server import running_local_model

ROOT = Path(__file__).resolve().parents[2]


def project_of(test: pytest.Item) -> str:
    return f"pydantic-ai-{test.name.removeprefix('test_')[:40]}"


@pytest.fixture(scope="module")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalModelServer]:
    with running_local_model("smollm2", tmp_path_factory.mktemp("llm")) as server:
        yield server


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    folder = tmp_path_factory.mktemp("pydantic-ai-sidecar")
    with quick_sidecar(folder, FAULTFINDER_ATTRIBUTORS="first_error") as running:
        yield running


@pytest.fixture
def instrumented(sidecar: Sidecar, request: pytest.FixtureRequest) -> Iterator[TracerProvider]:
    """Every pydantic-ai agent traced into a provider that exports to the sidecar, in a
    project named after the test."""
    provider = configure(
        sidecar.url,
        service_name="shop",
        project=project_of(request.node),
        batch=False,
        set_global=False,
    )
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    try:
        yield provider
    finally:
        Agent.instrument_all(False)
        shutdown()


def calling(tool: str) -> ModelSettings:
    """Make the model call `tool`: llama.cpp's server honours only a named tool choice."""
    return ModelSettings(
        temperature=0,
        max_tokens=32,
        extra_body={"tool_choice": {"type": "function", "function": {"name": tool}}},
    )


class CatalogError(LookupError):
    """The catalog has no entry for an item."""


def local_model(server: LocalModelServer) -> OpenAIChatModel:
    return OpenAIChatModel(
        "local",
        provider=OpenAIProvider(base_url=server.base_url, api_key="local"),
        # llama.cpp's server reads `max_tokens`, not `max_completion_tokens`.
        profile=OpenAIModelProfile(openai_chat_supports_max_completion_tokens=False),
    )


def test_delegation_with_a_raising_tool_fails_and_is_blamed_on_the_delegate(
    model_server: LocalModelServer,
    sidecar: Sidecar,
    instrumented: TracerProvider,
    request: pytest.FixtureRequest,
) -> None:
    # Pure pydantic-ai: no faultfinder span at all, the Orchestrator's run is the root.
    model = local_model(model_server)
    price_lookup = Agent(
        model,
        name="PriceLookup",
        instructions="You find unit prices in the catalog.",
        output_type=float,
        model_settings=calling("lookup_price"),
    )

    @price_lookup.tool_plain
    def lookup_price(item: Literal["notebook", "pen"]) -> float:
        """The catalog's unit price of one item, in EUR."""
        raise CatalogError(f"no catalog entry for {item!r}")

    orchestrator = Agent(
        model,
        name="Orchestrator",
        instructions="You delegate price questions to PriceLookup.",
        model_settings=calling("ask_price_lookup"),
    )

    @orchestrator.tool
    async def ask_price_lookup(ctx: RunContext[object], item: Literal["notebook", "pen"]) -> float:
        """Ask the PriceLookup agent for the unit price of one item."""
        result = await price_lookup.run(f"Unit price of one {item}?", usage=ctx.usage)
        return result.output

    task = "What does one pen cost?"
    with pytest.raises(CatalogError):
        orchestrator.run_sync(task)
    instrumented.force_flush()

    with Client(sidecar.url) as client:
        (summary,) = client.runs(project=project_of(request.node))
        got = client.wait_for_run(summary.id, "attributed", timeout=60, poll_interval=0.1)
    assert got.outcome is None  # failed by the root's error status alone
    trajectory = got.trajectory
    assert trajectory.task == task
    assert trajectory.metadata["service"] == "shop"
    assert trajectory.agents == ("Orchestrator", "PriceLookup")
    # The delegating tool call and both agent runs contain other steps: not steps themselves.
    assert [(step.agent, step.kind) for step in trajectory.steps] == [
        ("Orchestrator", "llm"),
        ("PriceLookup", "llm"),
        ("PriceLookup", "tool"),
    ]
    times = [step.start_time.timestamp() for step in trajectory.steps if step.start_time]
    assert len(times) == 3 and times == sorted(times)
    asked, looked_up, failed = trajectory.steps
    assert asked.content.startswith("ask_price_lookup(")
    assert looked_up.content.startswith("lookup_price(")
    assert asked.metadata["model"] == "local" and asked.metadata["output_tokens"] > 0
    assert (failed.tool_name, failed.status) == ("lookup_price", "error")
    assert "CatalogError" in (failed.error or "") and "no catalog entry" in (failed.error or "")
    assert failed.tool_arguments is not None and "item" in failed.tool_arguments

    (attribution,) = got.attributions
    assert attribution.ok and attribution.method == "first_error"
    # Blamed: the delegate, for the request that called the failing tool (or the call).
    assert attribution.agent == "PriceLookup"
    assert attribution.step in (looked_up.index, failed.index)


def test_an_answer_graded_wrong_afterwards_is_attributed(
    model_server: LocalModelServer,
    sidecar: Sidecar,
    instrumented: TracerProvider,
    request: pytest.FixtureRequest,
) -> None:
    def total_with_vat(net_eur: float) -> float:
        """The total including 20% VAT of a net amount in EUR."""
        return round(net_eur * 1.2, 2)

    calculator = Agent(
        local_model(model_server),
        name="Calculator",
        instructions="You add VAT to net amounts.",
        output_type=ToolOutput(total_with_vat, name="total_with_vat"),
        model_settings=calling("total_with_vat"),
    )
    task = "The net amount is 15.90 EUR. What is the total with 20% VAT?"
    answer = calculator.run_sync(task).output
    instrumented.force_flush()

    with Client(sidecar.url) as client:
        (summary,) = client.runs(project=project_of(request.node))
        # The run succeeded as far as the program can tell: a grader says otherwise.
        client.post_outcome(summary.id, "failure", reason="wrong total", ground_truth="19.08")
        got = client.wait_for_run(summary.id, "attributed", timeout=60, poll_interval=0.1)
    assert got.outcome == "failure"
    trajectory = got.trajectory
    # The answer is the agent run's own output (pydantic-ai's `final_result`).
    assert trajectory.final_answer is not None and float(trajectory.final_answer) == answer
    assert (trajectory.task, trajectory.ground_truth) == (task, "19.08")
    assert [(step.agent, step.kind) for step in trajectory.steps] == [
        ("Calculator", "llm"),
        ("Calculator", "tool"),
    ]
    asked, computed = trajectory.steps
    assert asked.content.startswith("total_with_vat(")
    assert computed.tool_name == "total_with_vat" and computed.status != "error"
    assert computed.tool_result is not None and float(computed.tool_result) == answer
    (attribution,) = got.attributions
    assert attribution.ok and attribution.agent == "Calculator"


def run_example(sidecar: Sidecar, model_server: LocalModelServer) -> str:
    """Run examples/framework_pydantic_ai.py the way a user would, configured by the environment."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OTEL_", "FAULTFINDER_", "OPENAI_"))
    }
    environment.update(
        FAULTFINDER_ENDPOINT=sidecar.url,
        OPENAI_BASE_URL=model_server.base_url,
        OPENAI_API_KEY="local",
        OPENAI_MODEL="local",
    )
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "framework_pydantic_ai.py")],
        env=environment,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"{result.stderr}\n--- sidecar log ---\n{sidecar.log()}"
    return result.stdout


@pytest.mark.slow
def test_the_pydantic_ai_example_is_assembled_failed_and_attributed(
    model_server: LocalModelServer, sidecar: Sidecar
) -> None:
    output = run_example(sidecar, model_server)
    match = re.search(r"run ([0-9a-f]{32}) finished: failure", output)
    assert match, output

    with Client(sidecar.url) as client:
        got: RunDetail = client.wait_for_run(
            match.group(1), "attributed", timeout=60, poll_interval=0.1
        )
    assert (got.project, got.outcome) == ("examples", "failure")
    trajectory = got.trajectory
    assert trajectory.metadata["framework"] == "pydantic-ai"
    assert trajectory.agents == ("Orchestrator", "PriceLookup", "Calculator")
    assert trajectory.ground_truth == "19.08 EUR"
    assert trajectory.final_answer is not None and trajectory.final_answer != "19.08 EUR"
    assert {step.kind for step in trajectory.steps} == {"llm", "tool", "message"}
    # Each tool call the model made is followed by the tool's own step.
    for step in trajectory.steps:
        if step.kind == "llm" and step.agent != "Orchestrator":
            following = trajectory.steps[step.index + 1]
            assert following.kind == "tool" and step.content.startswith(f"{following.tool_name}(")

    (failed,) = [step for step in trajectory.steps if step.status == "error"]
    assert (failed.agent, failed.kind, failed.tool_name) == (
        "PriceLookup",
        "tool",
        "catalog_lookup",
    )
    assert "CatalogError" in (failed.error or "") and "pen" in (failed.tool_arguments or "")
    # After the failed lookup PriceLookup guesses, and the Calculator uses the guess.
    guess = trajectory.steps[failed.index + 1]
    assert guess.agent == "PriceLookup" and guess.content.startswith("estimate_price(")
    final = trajectory.steps[-1]
    assert (final.agent, final.kind) == ("Orchestrator", "message")
    assert final.content == f"Final answer: {trajectory.final_answer}"

    (attribution,) = got.attributions
    assert attribution.ok and attribution.agent == "PriceLookup"
