"""Injectors plant the flaw their mode names, keep the reply well formed, and never plant
the correct answer; grading reads exact answers the way a person would."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from faultfinder.injection.exchanges import (
    canonical_request,
    reply_text,
    reply_tool_calls,
    sse_chunks,
)
from faultfinder.injection.grading import answers_match, final_line
from faultfinder.injection.injectors import (
    InjectionContext,
    LLMInjector,
    deterministic_injectors,
    eligible_calls,
)

TOOL_RESULT = "Oslo: population 709,037 (2024). Bergen: population 291,940 (2024)."


def reply(content: str | None = None, **calls: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{n}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}
            for n, (name, args) in enumerate(calls.items())
        ]  # fmt: skip
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def context(answer_reply: dict[str, Any], *, seed: int = 1, **request: Any) -> InjectionContext:
    messages = request.pop("messages", None) or [
        {"role": "system", "content": "You are the Researcher."},
        {"role": "user", "content": "How many more people live in Oslo than in Bergen?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c0", "type": "function",
         "function": {"name": "population_lookup", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "c0", "content": TOOL_RESULT},
    ]  # fmt: skip
    return InjectionContext(
        task="How many more people live in Oslo than in Bergen?",
        answer="417097",
        request={"messages": messages, **request},
        reply=answer_reply,
        rng=random.Random(seed),
    )


def injector(mode: str) -> Any:
    (found,) = [i for i in deterministic_injectors() if i.mode == mode]
    return found


@pytest.mark.parametrize("seed", range(5))
def test_hallucination_replaces_a_relayed_figure_with_one_no_observation_holds(seed: int) -> None:
    text = "Oslo has 709,037 people and Bergen 291,940."
    flawed = injector("R.1")(context(reply(text), seed=seed))
    assert flawed is not None and flawed.mode == "R.1"
    new = reply_text(flawed.reply)
    assert new != text
    changed = [w for w in new.split() if w not in text.split()]
    assert changed and all(w.strip(".") not in TOOL_RESULT for w in changed)
    assert "417,097" not in new and "417097" not in new


def test_calculation_slip_changes_the_computed_figure() -> None:
    text = "Oslo has 709,037 and Bergen 291,940, so the difference is 417,097."
    flawed = injector("R.3")(context(reply(text)))
    assert flawed is not None
    new = reply_text(flawed.reply)
    assert "709,037" in new and "291,940" in new and "417,097" not in new


def test_reasoning_error_reverses_a_comparison() -> None:
    flawed = injector("R.2")(context(reply("Oslo is larger than Bergen.")))
    assert flawed is not None and reply_text(flawed.reply) == "Oslo is smaller than Bergen."


def test_tool_argument_error_keeps_valid_json_and_the_same_tool() -> None:
    original = reply(None, population_lookup={"city": "Bergen"})
    flawed = injector("A.1")(context(original))
    assert flawed is not None
    (call,) = reply_tool_calls(flawed.reply)
    assert call["function"]["name"] == "population_lookup"
    arguments = json.loads(call["function"]["arguments"])
    assert arguments["city"] != "Bergen" and arguments["city"]


def test_premature_termination_answers_with_a_seen_figure_never_the_answer() -> None:
    for seed in range(10):
        flawed = injector("A.3")(
            context(reply(None, population_lookup={"city": "Bergen"}), seed=seed)
        )
        assert flawed is not None
        assert not reply_tool_calls(flawed.reply)
        assert "417" not in reply_text(flawed.reply)


def test_repetition_repeats_the_previous_call() -> None:
    flawed = injector("A.4")(context(reply(None, population_lookup={"city": "Bergen"})))
    assert flawed is not None
    (call,) = reply_tool_calls(flawed.reply)
    assert json.loads(call["function"]["arguments"]) == {"city": "Oslo"}


def test_delegation_error_hands_off_to_another_agent() -> None:
    tools = [
        {"type": "function", "function": {"name": name}}
        for name in ("transfer_to_analyst", "transfer_to_writer", "population_lookup")
    ]
    flawed = injector("C.1")(context(reply(None, transfer_to_analyst={}), tools=tools))
    assert flawed is not None
    (call,) = reply_tool_calls(flawed.reply)
    assert call["function"]["name"] == "transfer_to_writer"
    # A plain tool call is no delegation.
    assert (
        injector("C.1")(context(reply(None, population_lookup={"city": "x"}), tools=tools)) is None
    )


def test_communication_failure_withholds_the_figures() -> None:
    flawed = injector("C.2")(
        context(reply("I looked it up. Oslo has 709,037 people. Over to you."))
    )
    assert flawed is not None
    assert "709,037" not in reply_text(flawed.reply)
    assert "Over to you." in reply_text(flawed.reply)


def test_modes_that_do_not_fit_the_reply_decline() -> None:
    calls = reply(None, population_lookup={"city": "Oslo"})
    for mode in ("R.1", "R.2", "R.3", "C.2"):
        assert injector(mode)(context(calls)) is None
    assert injector("A.1")(context(reply("Just text."))) is None


def test_a_model_written_flaw_is_refused_when_it_plants_the_answer_or_changes_nothing() -> None:
    text = "Oslo has 709,037 people."
    ctx = context(reply(text))
    assert LLMInjector("R.4", lambda s, u: "The difference is 417,097.")(ctx) is None
    assert LLMInjector("R.4", lambda s, u: f"```\n{text}\n```")(ctx) is None
    planted = LLMInjector("R.4", lambda s, u: "Oslo covers 454 square kilometres.")(ctx)
    assert planted is not None and planted.injector == "llm"
    assert reply_text(planted.reply) == "Oslo covers 454 square kilometres."


def test_a_model_written_flaw_loses_what_the_model_said_about_its_edit() -> None:
    text = "The city of Marrowby was founded in 1811."
    ctx = context(reply(text))
    written = (
        "Here is the edited message:\nThe city of Marrowby was founded in 1611.\n\n\n"
        "This edit maintains the original information while introducing a mistake."
    )
    planted = LLMInjector("V.1", lambda s, u: written)(ctx)
    assert planted is not None
    assert reply_text(planted.reply) == "The city of Marrowby was founded in 1611."
    noted = "Marrowby was founded in 1611.\n\nNote: the year was changed."
    planted = LLMInjector("V.1", lambda s, u: noted)(ctx)
    assert planted is not None and reply_text(planted.reply) == "Marrowby was founded in 1611."
    echoed = "Marrowby was founded in 1611.\n\nThe mistake to plant: Inadequate verification."
    planted = LLMInjector("V.1", lambda s, u: echoed)(ctx)
    assert planted is not None and reply_text(planted.reply) == "Marrowby was founded in 1611."
    set_apart = "Marrowby was founded in 1611.\n\n\nGoal drift: the founding year moved."
    planted = LLMInjector("V.1", lambda s, u: set_apart)(ctx)
    assert planted is not None and reply_text(planted.reply) == "Marrowby was founded in 1611."
    rambling = "Marrowby, founded in 1611, " + "a landmark of the region, " * 20
    assert LLMInjector("PL.2", lambda s, u: rambling)(ctx) is None


def test_the_last_call_and_empty_replies_are_not_eligible() -> None:
    replies = [reply(None, lookup={}), reply(""), reply("Oslo."), reply("FINAL: 3")]
    assert eligible_calls(replies) == [0, 2]


def test_requests_compare_without_volatile_fields_and_minted_ids() -> None:
    def request(call_id: str, **extra: Any) -> dict[str, Any]:
        return {
            "model": "local",
            "messages": [
                {"role": "assistant", "tool_calls": [{"id": call_id, "type": "function",
                 "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": call_id, "content": "1"},
            ],
            **extra,
        }  # fmt: skip

    assert canonical_request(request("abc")) == canonical_request(
        request("xyz", user="u", stream=True, stream_options={"include_usage": True})
    )
    assert canonical_request(request("abc")) != canonical_request(request("abc", temperature=1))


def test_streamed_chunks_carry_the_whole_reply() -> None:
    chunks = list(sse_chunks(reply("Hi", lookup={"a": 1}), include_usage=False))
    assert chunks[-1] == b"data: [DONE]\n\n"
    events = [json.loads(chunk[6:]) for chunk in chunks[:-1]]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events)
    calls = [c for e in events for c in e["choices"][0]["delta"].get("tool_calls", [])]
    assert text == "Hi" and calls[0]["function"] == {"name": "lookup", "arguments": '{"a": 1}'}


@pytest.mark.parametrize(
    ("final", "answer", "correct"),
    [
        ("The population of Oslo is 709,037.", "709037", True),
        ("709037.0", "709,037", True),
        ("Oslo: 709,037 in 2024", "709037", False),
        ("It is 12.5 km", "12.5", True),
        ("Answer: Lisbon", "lisbon", True),
        ("Answer: Lisbonne", "lisbon", False),
        ("", "3", False),
    ],
)
def test_exact_answers(final: str, answer: str, correct: bool) -> None:
    assert answers_match(final, answer) is correct


def test_the_final_answer_is_the_last_line() -> None:
    assert final_line("log\n\n  42  \n\n") == "42"
