"""`faultfinder verify`'s pure parts: which model call made a step, which candidates the
stored attributions name, corrections, a candidate's result, and the `counterfactual`
attribution the sidecar makes of a verification."""

from __future__ import annotations

import contextlib
import http.server
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from faultfinder.attributors.model import AttributionStatus, Step, StepKind, Trajectory
from faultfinder.injection.corrections import (
    Corrector,
    corrected_reply,
    parse_corrections,
    request_tools,
)
from faultfinder.injection.exchanges import Exchange, Recording
from faultfinder.injection.sidecar_api import SidecarAPI
from faultfinder.injection.step_calls import model_calls_of_steps
from faultfinder.injection.verify import (
    Verification,
    VerifySettings,
    attributed_candidates,
    candidate_result,
)
from faultfinder.server.metrics import ServerMetrics
from faultfinder.server.schemas import VerificationIn
from faultfinder.server.verifications import counterfactual_attribution
from tests.loopback import serving


def _reply(content: str | None = None, **call: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if call:
        message["tool_calls"] = [
            {"id": "c1", "type": "function",
             "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}
        ]  # fmt: skip
    return {"choices": [{"index": 0, "message": message}]}


def test_each_step_maps_to_the_model_call_whose_reply_it_shows() -> None:
    steps = [
        Step(index=0, agent="user", kind=StepKind.HUMAN, content="Population of Oslo?"),
        Step(
            index=1,
            agent="Coordinator",
            kind=StepKind.LLM,
            content='ask_researcher({"question":  "Oslo?"})',
        ),
        Step(
            index=2,
            agent="Researcher",
            kind=StepKind.MESSAGE,
            tool_name="lookup",
            tool_arguments='{"city": "Oslo"}',
        ),
        Step(index=3, agent="Researcher", kind=StepKind.TOOL, content="Oslo has 709,037"),
        Step(index=4, agent="Researcher", kind=StepKind.MESSAGE, content="Oslo has 709,037."),
        Step(index=5, agent="Coordinator", kind=StepKind.MESSAGE, content="It is 709,037."),
    ]
    recording = Recording(
        [
            Exchange({}, _reply(name="ask_researcher", arguments={"question": "Oslo?"})),
            Exchange({}, _reply(name="lookup", arguments={"city": "Oslo"})),
            Exchange({}, _reply("Oslo has   709,037.")),
            Exchange({}, _reply("It is 709,037.")),
        ]
    )
    trajectory = Trajectory(run_id="r", steps=tuple(steps))
    # The tool's own output (step 3) and the task are made by no model call.
    assert model_calls_of_steps(trajectory, recording) == {1: 0, 2: 1, 4: 2, 5: 3}


def test_candidates_are_the_attributions_top_k_taken_in_turns() -> None:
    attributions: list[dict[str, Any]] = [
        {"method": "all_at_once", "status": "ok", "step": 7,
         "candidates": [{"step": 7}, {"step": 3}, {"step": 9}]},
        {"method": "learned", "status": "ok", "step": 5, "candidates": [{"step": 3}]},
        {"method": "random", "status": "failed", "step": None},
        {"method": "counterfactual", "status": "ok", "step": 2},
    ]  # fmt: skip
    assert attributed_candidates(attributions, 2) == [7, 5, 3]
    assert attributed_candidates(attributions, 1) == [7, 5]


def test_a_candidate_flips_when_most_replays_that_reached_it_succeed() -> None:
    assert candidate_result([{"outcome": "flipped"}, {"outcome": "still_failed"},
                             {"outcome": "flipped"}]) == "flipped"  # fmt: skip
    assert candidate_result([{"outcome": "flipped"}, {"outcome": "still_failed"}]) == (
        "still_failed"
    )
    assert candidate_result([{"outcome": "diverged"}]) == "diverged"
    assert candidate_result([{"outcome": "unmapped"}]) == "unmapped"


def test_corrections_replace_a_tool_calls_arguments_or_the_message() -> None:
    call = _reply(name="ask_researcher", arguments={"question": "x"})
    fixed = corrected_reply(call, '{"question": "How many people live in Oslo?"}')
    (made,) = fixed["choices"][0]["message"]["tool_calls"]
    assert made["function"]["name"] == "ask_researcher"
    assert json.loads(made["function"]["arguments"]) == {
        "question": "How many people live in Oslo?"
    }
    answered = corrected_reply(call, "Oslo has 709,037 inhabitants.")
    assert "tool_calls" not in answered["choices"][0]["message"]
    assert answered["choices"][0]["message"]["content"] == "Oslo has 709,037 inhabitants."
    assert answered["choices"][0]["finish_reason"] == "stop"

    assert parse_corrections(("7=Oslo has 709,037.", "2={\"city\": \"Oslo\"}")) == {
        7: "Oslo has 709,037.", 2: '{"city": "Oslo"}'
    }  # fmt: skip
    with pytest.raises(ValueError, match="N=TEXT"):
        parse_corrections(("seven=text",))


@pytest.mark.parametrize(
    ("correction", "tool", "arguments"),
    [
        ('{{"value": 42, "to": "miles"}}', "conversion", {"value": 42, "to": "miles"}),
        (
            '{{"name": "conversion", "arguments": {"value": 42, "to": "miles"}}}',
            "conversion",
            {"value": 42, "to": "miles"},
        ),
        (
            '{"name": "conversion", "arguments": "{\\"value\\": 42}"}',
            "conversion",
            {"value": 42},
        ),
        ('{"name": "city_facts", "parameters": {"city": "Oslo"}}', "city_facts", {"city": "Oslo"}),
        ('{"name": "Oslo"}', "conversion", {"name": "Oslo"}),
    ],
)
def test_a_corrected_call_written_in_another_shape_still_calls_a_tool(
    correction: str, tool: str, arguments: dict[str, Any]
) -> None:
    # Shapes a local model wrote when asked for the arguments alone: braces doubled as a
    # format string prints them, the whole call, the call with its arguments as a string.
    fixed = corrected_reply(_reply(name="conversion", arguments={"value": 4}), correction)
    (made,) = fixed["choices"][0]["message"]["tool_calls"]
    assert made["function"]["name"] == tool
    assert json.loads(made["function"]["arguments"]) == arguments


def test_a_message_corrected_into_a_call_of_an_offered_tool_calls_it() -> None:
    # An agent that stopped early ("The answer is 40.") should have looked the figure up.
    stopped = _reply("The answer is 40.")
    call = '{"name": "city_facts", "arguments": {"city": "Varnholm"}}'
    fixed = corrected_reply(stopped, call, tools=["city_facts", "calculate"])
    message = fixed["choices"][0]["message"]
    (made,) = message["tool_calls"]
    assert made["function"]["name"] == "city_facts"
    assert json.loads(made["function"]["arguments"]) == {"city": "Varnholm"}
    assert message["content"] is None and fixed["choices"][0]["finish_reason"] == "tool_calls"
    # A tool the request did not offer, or no tools at all: the text is the message.
    for tools in (["calculate"], []):
        kept = corrected_reply(stopped, call, tools=tools)
        assert kept["choices"][0]["message"]["content"] == call
        assert "tool_calls" not in kept["choices"][0]["message"]
    request = {"tools": [{"type": "function", "function": {"name": "city_facts"}}, {"x": 1}]}
    assert request_tools(request) == ["city_facts"]


def test_a_verification_is_an_attribution_of_the_earliest_flipped_step() -> None:
    verification = VerificationIn.model_validate(
        {
            "candidates": [
                {"step": 7, "agent": "Researcher", "result": "flipped", "replays": 3, "flips": 3},
                {"step": 5, "agent": "Coder", "result": "still_failed", "replays": 3},
                {"step": 3, "agent": "Planner", "result": "still_failed", "replays": 3},
                {"step": 9, "agent": "Coder", "result": "flipped", "replays": 3, "flips": 2},
                {"step": 1, "agent": "Planner", "result": "diverged"},
            ]
        }
    )
    answer = counterfactual_attribution(verification)
    assert answer.method == "counterfactual" and answer.status is AttributionStatus.OK
    assert (answer.agent, answer.step, answer.confidence) == ("Researcher", 7, 1.0)
    assert answer.reason == (
        "correcting step 7 made the run succeed in 3 of 3 replays; correcting later step 9"
        " did too; correcting steps 3 and 5 did not; step 1 could not be replayed (the"
        " prefix diverged)"
    )
    assert answer.mode is None

    none = counterfactual_attribution(
        VerificationIn.model_validate(
            {"candidates": [{"step": 4, "agent": "Coder", "result": "still_failed"}]}
        )
    )
    assert none.status is AttributionStatus.FAILED and none.step is None
    assert none.reason == "correcting step 4 did not"


def test_metrics_count_verified_candidates_by_result() -> None:
    metrics = ServerMetrics()
    metrics.observe_verification(["flipped", "still_failed", "still_failed"])
    text = metrics.exposition().decode()
    assert 'faultfinder_verifications_total{result="flipped"} 1.0' in text
    assert 'faultfinder_verifications_total{result="still_failed"} 2.0' in text


def test_a_correction_that_repeats_the_prompts_step_header_loses_it() -> None:
    step = Step(index=0, agent="analyst", kind=StepKind.LLM, content="Ashgrove is in Veldt.")
    trajectory = Trajectory(run_id="r", task="Where is Ashgrove?", steps=(step,))
    echoed = Corrector(lambda system, user: "[3] analyst (llm): Ashgrove is in Caldoria.")
    plain = Corrector(lambda system, user: "Ashgrove [3] is in Caldoria (llm): yes.")
    reply = {"choices": [{"message": {"role": "assistant", "content": step.content}}]}
    assert echoed(trajectory, 0, reply) == "Ashgrove is in Caldoria."
    assert plain(trajectory, 0, reply) == "Ashgrove [3] is in Caldoria (llm): yes."


def test_a_message_steps_correction_is_asked_with_the_right_answer_beside_the_request() -> None:
    # Told the answer only at the top, a small corrector kept a guessing step's sentence
    # and filled it from the task's own words; the answer is restated where it writes.
    step = Step(
        index=0,
        agent="researcher",
        kind=StepKind.LLM,
        content="I have enough to answer now. The answer is South.",
    )
    known = Trajectory(
        run_id="r",
        task="How many units were sold in the South region?",
        steps=(step,),
        ground_truth="740",
    )
    unknown = Trajectory(run_id="r", task=known.task, steps=(step,))
    message = {"choices": [{"message": {"role": "assistant", "content": step.content}}]}
    call = _reply(name="sum_units", arguments={"region": "North"})
    corrector = Corrector(lambda system, user: "")
    asked = corrector.prompt(known, 0, message)
    assert asked.rstrip().endswith("it must give the right answer: 740")
    assert "right answer" not in corrector.prompt(unknown, 0, message).split(">>>")[-1]
    # A call's correction is its arguments, chosen to get what the right answer needs.
    asked_call = corrector.prompt(known, 0, call).split(">>>")[-1]
    assert "to reach the right answer, 740." in asked_call
    assert "right answer" not in corrector.prompt(unknown, 0, call).split(">>>")[-1]


def test_a_call_is_corrected_knowing_the_tool_and_what_the_call_returned() -> None:
    steps = (
        Step(index=0, agent="researcher", kind=StepKind.LLM, content='city_facts({"city": "How"})'),
        Step(
            index=1,
            agent="researcher",
            kind=StepKind.TOOL,
            content="No city named 'How'. Known cities: Varnholm, Dunmore Ridge.",
            tool_name="city_facts",
        ),
    )
    run = Trajectory(
        run_id="r", task="How much higher is Dunmore Ridge than Varnholm?", steps=steps
    )
    call = _reply(name="city_facts", arguments={"city": "How"})
    request = {
        "messages": [],
        "tools": [
            {"type": "function", "function": {"name": "country_facts", "parameters": {}}},
            {"type": "function", "function": {
                "name": "city_facts",
                "description": "Facts about one or more cities.",
                "parameters": {"type": "object", "properties": {"city": {
                    "type": "string", "description": "one name, or several separated by commas",
                }}},
            }},
        ],
    }  # fmt: skip
    asked = Corrector(lambda system, user: "").prompt(run, 0, call, request).split(">>>")[-1]
    assert "city_facts (Facts about one or more cities.; parameters:" in asked
    assert "several separated by commas" in asked
    assert "country_facts" not in asked
    assert "It returned: No city named 'How'. Known cities: Varnholm, Dunmore Ridge." in asked
    # Without the request (a user's own recording format), the call is still described.
    bare = Corrector(lambda system, user: "").prompt(run, 0, call).split(">>>")[-1]
    assert 'calls the tool city_facts with the arguments {"city": "How"}.' in bare


@contextlib.contextmanager
def _sidecar_that_knows_no_run() -> Iterator[str]:
    """A loopback HTTP server answering 404 to every request, as a sidecar on a fresh
    database answers for a run it never received."""

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    with serving(NotFound) as url:
        yield url


def _settings(tmp_path: Path, sidecar: str, run_id: str, kept_run: str) -> VerifySettings:
    trajectory = Trajectory(
        run_id=kept_run,
        task="Population of Oslo?",
        steps=(Step(index=0, agent="Researcher", kind=StepKind.MESSAGE, content="It is 5."),),
        ground_truth="709,037",
    )
    recording = tmp_path / "run.json"
    Recording(
        [Exchange({}, _reply("It is 5."))], {"trajectory": trajectory.model_dump(mode="json")}
    ).save(recording)
    return VerifySettings(
        program="true",
        recording=recording,
        run_id=run_id,
        sidecar_url=sidecar,
        upstream="http://127.0.0.1:9/v1",
        out=tmp_path / "out",
        task="Population of Oslo?",
    )


def test_a_run_the_sidecar_does_not_know_is_read_from_its_recording(tmp_path: Path) -> None:
    with _sidecar_that_knows_no_run() as sidecar:
        kept = Verification(_settings(tmp_path, sidecar, "r1", kept_run="r1"), None)
        detail = kept._run_detail(SidecarAPI(sidecar, None))
        assert detail["trajectory"]["ground_truth"] == "709,037"
        assert detail["attributions"] == [] and detail["from_recording"]
        # A recording of another run is not taken for this one: the 404 stands.
        other = Verification(_settings(tmp_path, sidecar, "r2", kept_run="r1"), None)
        with pytest.raises(httpx.HTTPStatusError):
            other._run_detail(SidecarAPI(sidecar, None))
