"""Long runs fit any model context: a prompt the endpoint still refuses as too long is
shortened (by the overflow the error reports, else by a fixed share) and sent again, so a
long run gets a shortened prompt and an attribution, never a failure for its length.

Served by the scripted stub enforcing a llama.cpp-style context window, and by the real
local model started with a small context.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from faultfinder.attributors.base import AttributeOptions, close_attributor, get_attributor
from faultfinder.attributors.llm.client import overflow_counts
from faultfinder.attributors.model import AttributionStatus
from tests.llm_attribution import assert_usable, long_trajectory, stub_settings
from tests.llm_server import running_local_model
from tests.stub_llm import ContextWindow, StubLLM, answer

PICK = answer({"agent": "Coder", "step": 37, "reason": "late slip"})


@pytest.mark.parametrize(
    "window",
    [
        ContextWindow(tokens=8192),
        ContextWindow(tokens=8192, reports_counts=False),
        # The server runs a smaller window than the settings say (n_ctx 2048).
        ContextWindow(tokens=2048),
    ],
    ids=["counts-reported", "no-counts", "smaller-server-window"],
)
async def test_a_long_run_refused_for_its_length_is_shortened_and_attributed(
    window: ContextWindow,
) -> None:
    trajectory = long_trajectory(62, 1500)
    stub = StubLLM([PICK], context=window)
    with stub.running():
        attributor = get_attributor(
            "all_at_once", settings=stub_settings(stub, context_tokens=8192, max_tokens=256)
        )
        attribution = await attributor.attribute(trajectory, AttributeOptions())
    assert attribution.status is AttributionStatus.OK, attribution.failure_reason
    assert (attribution.agent, attribution.step) == ("Coder", 37)
    assert_usable(attribution, trajectory)
    refused = [r for r in stub.requests if r.get("_rejected")]
    assert refused, "the stub's window is smaller than the estimate: the first prompt overflows"
    (sent,) = stub.completions
    assert window.prompt_tokens(sent) <= window.tokens
    for index in range(62):  # shortened, never cut off: every step keeps its line
        assert f"Step {index} - " in sent["messages"][-1]["content"]
    refits = attribution.details["context_refits"]
    assert len(refits) == len(refused)
    if window.reports_counts:
        assert refits[0]["available"] == window.tokens


async def test_a_search_over_segments_shortens_each_refused_prompt() -> None:
    trajectory = long_trajectory(24, 3000)
    window = ContextWindow(tokens=4096)
    # Binary search over 24 steps: at most five halvings, each answered "upper half".
    stub = StubLLM([answer({"half": "upper", "reason": "r"})] * 6, context=window)
    with stub.running():
        attributor = get_attributor(
            "binary_search", settings=stub_settings(stub, context_tokens=8192, max_tokens=128)
        )
        attribution = await attributor.attribute(trajectory, AttributeOptions())
    assert attribution.status is AttributionStatus.OK, attribution.failure_reason
    assert attribution.details["context_refits"]
    assert all(window.prompt_tokens(r) <= window.tokens for r in stub.completions)


async def test_a_window_too_small_for_any_log_fails_after_bounded_retries() -> None:
    stub = StubLLM([PICK], context=ContextWindow(tokens=300))
    with stub.running():
        attributor = get_attributor(
            "all_at_once", settings=stub_settings(stub, context_tokens=8192, max_tokens=64)
        )
        attribution = await attributor.attribute(long_trajectory(62, 500), AttributeOptions())
    assert attribution.status is AttributionStatus.FAILED
    assert "does not fit the model's context" in (attribution.failure_reason or "")
    assert 2 <= len(stub.requests) <= 6  # retried, and not forever


@pytest.mark.parametrize(
    ("body", "message", "counts"),
    [
        ({"error": {"n_prompt_tokens": 9041, "n_ctx": 8192}}, "", (9041, 8192)),
        (
            None,
            "This model's maximum context length is 8192 tokens. However, you requested "
            "9041 tokens (8529 in the messages, 512 in the completion).",
            (9041, 8192),
        ),
        (None, "Requested tokens (9041) exceed context window of 8192", (9041, 8192)),
        (None, "9,041 tokens requested of 8,192", (9041, 8192)),
        (None, "the request exceeds the available context size, try increasing it", (None, None)),
    ],
    ids=["llama.cpp-fields", "vllm-openai", "llama-cpp-python", "thousands", "no-counts"],
)
def test_context_errors_are_read_for_their_counts(
    body: object, message: str, counts: tuple[int | None, int | None]
) -> None:
    assert overflow_counts(body, message) == counts


async def test_the_real_small_model_attributes_a_60_step_run_in_a_2048_token_window(
    tmp_path: Path,
) -> None:
    trajectory = long_trajectory(60, 600)
    with running_local_model("smollm2", tmp_path, n_ctx=2048) as server:
        # The settings claim a larger window than the server has: the server's refusal
        # must teach the client its real size.
        settings = server.settings(context_tokens=8192, max_tokens=128, timeout=120.0)
        attributor = get_attributor("all_at_once", settings=settings)
        try:
            attribution = await attributor.attribute(trajectory, AttributeOptions())
        finally:
            await close_attributor(attributor)
    assert attribution.status is AttributionStatus.OK, attribution.failure_reason
    assert attribution.step is not None and 0 <= attribution.step < 60
    assert attribution.agent in trajectory.agents
    assert attribution.details["context_refits"]
