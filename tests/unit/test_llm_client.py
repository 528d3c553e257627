"""Reading model replies: JSON extraction, the Who&When text format, and validation against
the trajectory (no network here; the HTTP paths are in
tests/integration/test_llm_protocol_faults.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from faultfinder.attributors.llm import (
    ModelSettings,
    ReplyInvalid,
    StructuredRung,
    extract_json_object,
    parse_who_and_when_text,
    resolve_agent,
    resolve_step,
)
from faultfinder.attributors.model import Step, Trajectory

TEAM = Trajectory(
    run_id="r",
    steps=(
        Step(index=0, agent="Orchestrator", content="plan"),
        Step(index=1, agent="WebSurfer", content="search"),
        Step(index=2, agent="Excel_Expert", content="sum"),
    ),
)


@pytest.mark.parametrize(
    "reply",
    [
        '{"agent": "WebSurfer", "step": 1}',
        '```json\n{"agent": "WebSurfer", "step": 1}\n```',
        'Sure! The answer is {"agent": "WebSurfer", "step": 1} as requested.',
        '```\n{"agent": "WebSurfer", "step": 1}\n```\nHope this helps.',
    ],
)
def test_json_is_found_bare_fenced_or_in_prose(reply: str) -> None:
    assert extract_json_object(reply) == {"agent": "WebSurfer", "step": 1}


def test_raw_newlines_inside_json_strings_are_accepted() -> None:
    data = extract_json_object('{"reason": "first line\nsecond line"}')
    assert data["reason"] == "first line\nsecond line"


@pytest.mark.parametrize("reply", ["", "no json here", '{"agent": "WebSurfer", "step": ', "[1, 2]"])
def test_replies_without_a_json_object_are_invalid(reply: str) -> None:
    with pytest.raises(ReplyInvalid):
        extract_json_object(reply)


def test_who_and_when_text_answer_is_parsed() -> None:
    reply = (
        "Agent Name: WebSurfer\nStep Number: 1\n"
        "Reason for Mistake: clicked the wrong link,\nso the data was stale."
    )
    assert parse_who_and_when_text(reply) == {
        "agent": "WebSurfer",
        "step": 1,
        "reason": "clicked the wrong link,\nso the data was stale.",
    }


def test_markdown_decorated_text_answer_is_parsed() -> None:
    reply = "**Agent Name:** **WebSurfer**\n**Step Number:** 1\n**Confidence:** 80%"
    data = parse_who_and_when_text(reply)
    assert resolve_agent(data["agent"], TEAM) == "WebSurfer"
    assert data["step"] == 1
    assert data["confidence"] == pytest.approx(0.8)


def test_text_without_the_answer_lines_is_invalid() -> None:
    with pytest.raises(ReplyInvalid, match="Agent Name"):
        parse_who_and_when_text("I am not sure which agent failed.")


@pytest.mark.parametrize(
    ("named", "expected"),
    [
        ("websurfer", "WebSurfer"),
        ("Web Surfer", "WebSurfer"),
        ("excel-expert", "Excel_Expert"),
        ("Orchestrator (thought)", "Orchestrator"),
        ("`Excel_Expert`.", "Excel_Expert"),
        ("the WebSurfer agent", "WebSurfer"),
    ],
)
def test_agent_names_resolve_to_the_trajectorys_spelling(named: str, expected: str) -> None:
    assert resolve_agent(named, TEAM) == expected


@pytest.mark.parametrize("named", ["Mallory", "", None, 3, "WebSurfer and Excel_Expert"])
def test_unknown_or_ambiguous_agents_are_invalid(named: object) -> None:
    with pytest.raises(ReplyInvalid):
        resolve_agent(named, TEAM)


@pytest.mark.parametrize(("value", "expected"), [(2, 2), ("2", 2), ("Step 2", 2), (2.0, 2)])
def test_step_numbers_are_read_from_common_shapes(value: object, expected: int) -> None:
    assert resolve_step(value, range(3)) == expected


@pytest.mark.parametrize("value", [3, -1, True, "two", None, 1.5])
def test_step_numbers_outside_the_trajectory_are_invalid(value: object) -> None:
    with pytest.raises(ReplyInvalid, match="step"):
        resolve_step(value, range(3))


def test_invalid_step_message_lists_the_valid_steps() -> None:
    with pytest.raises(ReplyInvalid, match="valid steps: 0-2, 5"):
        resolve_step(9, [0, 1, 2, 5])


def test_the_structured_output_ladder_goes_from_schema_to_text() -> None:
    rung: StructuredRung | None = StructuredRung.JSON_SCHEMA
    seen = []
    while rung is not None:
        seen.append(rung.value)
        rung = rung.weaker()
    assert seen == ["json_schema", "json_object_schema", "json_object", "text"]


def test_settings_from_environment() -> None:
    settings = ModelSettings.from_environment(
        {
            "OPENAI_BASE_URL": "http://10.0.0.5:8000/v1",
            "OPENAI_API_KEY": "sk-secret",
            "FAULTFINDER_LLM_MODEL": "qwen",
            "FAULTFINDER_LLM_MAX_TOKENS": "256",
            "FAULTFINDER_LLM_FIRST_RUNG": "json_object",
        },
        timeout=30.0,
        retries=None,
    )
    assert settings.base_url == "http://10.0.0.5:8000/v1"
    assert (settings.model, settings.max_tokens, settings.timeout) == ("qwen", 256, 30.0)
    assert settings.first_rung is StructuredRung.JSON_OBJECT
    assert settings.retries == 2
    assert "sk-secret" not in repr(settings)


def test_invalid_settings_name_the_field() -> None:
    with pytest.raises(ValidationError, match="max_tokens"):
        ModelSettings.from_environment({"FAULTFINDER_LLM_MAX_TOKENS": "lots"})
    with pytest.raises(ValidationError, match="concurrency"):
        ModelSettings(concurrency=0)
