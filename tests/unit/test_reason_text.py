"""What the zero-LLM attributors' reasons and candidates' evidence say: the agent that made
a tool call is the one the call's step records, not whoever spoke before it; a finding
that reaches a step twice is said once; a reason is a sentence or two a person acts on
(agent, step, evidence, what it contradicts), quotes cut at whole words, the model's own
terms kept in the details; an LLM answer whose step is another agent's says so; an alarm
ranks its step among the run's steps."""

from __future__ import annotations

import re

import pytest

from faultfinder.attributors.auditor import standing
from faultfinder.attributors.base import AttributeOptions, get_attributor
from faultfinder.attributors.excerpts import around, quoted
from faultfinder.attributors.learned import attributor as learned_attributor
from faultfinder.attributors.learned.blame import callers
from faultfinder.attributors.learned.evidence import Evidence
from faultfinder.attributors.llm.replies import with_step_owner
from faultfinder.attributors.model import Attribution, Step, StepKind, Trajectory
from faultfinder.attributors.simulated_user import UserWithheld

ARGUMENT = "since='2031-02-03'"


def _run(*steps: dict[str, str | StepKind]) -> Trajectory:
    return Trajectory(
        run_id="r",
        task="Which flights leave Oslo this week?",
        steps=tuple(Step(index=i, **step) for i, step in enumerate(steps)),  # type: ignore[arg-type]
    )


def _searcher_called_after_planner_spoke() -> Trajectory:
    # The planner speaks; the searcher's tool call follows, recorded under its own name.
    return _run(
        {
            "agent": "Planner",
            "kind": StepKind.MESSAGE,
            "content": "Searcher, look up the flights leaving Oslo.",
        },
        {
            "agent": "Searcher",
            "kind": StepKind.TOOL,
            "tool_name": "search_flights",
            "tool_arguments": '{"origin": "Oslo", "since": "2031-02-03"}',
            "content": "No flights found",
            "tool_result": "No flights found",
        },
        {"agent": "Searcher", "kind": StepKind.MESSAGE, "content": "No flights leave Oslo."},
    )


async def _attribute(trajectory: Trajectory) -> Attribution:
    return await get_attributor("learned").attribute(trajectory, AttributeOptions())


async def test_a_call_is_the_agent_its_step_records_not_the_previous_speaker() -> None:
    result = await _attribute(_searcher_called_after_planner_spoke())
    said = [result.reason, *(candidate.evidence for candidate in result.candidates)]
    assert any(f"Searcher called search_flights with {ARGUMENT}" in text for text in said), said
    assert not any("Planner called" in text for text in said), said
    assert (result.agent, result.step) == ("Searcher", 1), result.reason


def test_callers_name_the_recorded_agents_own_turn_else_the_last_speaker() -> None:
    trajectory = _run(
        {"agent": "Searcher", "kind": StepKind.MESSAGE, "content": "I will search."},
        {"agent": "Planner", "kind": StepKind.MESSAGE, "content": "Go ahead."},
        {"agent": "Searcher", "kind": StepKind.TOOL, "tool_name": "search_flights"},
        {"agent": "search_flights", "kind": StepKind.TOOL, "content": "no flights"},
    )
    # The searcher's call answers to its own turn; a report under the tool's own name to
    # the agent that acted last.
    assert callers(trajectory.steps) == [0, 1, 0, 1]


@pytest.mark.parametrize(
    "second",
    [
        f"Searcher called search_flights with {ARGUMENT}, which nothing mentions",
        f"called search_flights with {ARGUMENT}",
    ],
    ids=["identical", "contained"],
)
async def test_a_finding_reaching_a_step_twice_is_said_once(
    monkeypatch: pytest.MonkeyPatch, second: str
) -> None:
    trajectory = _searcher_called_after_planner_spoke()
    lead = f"Searcher called search_flights with {ARGUMENT}, which nothing mentions"
    other = "Searcher repeated one of its recent steps almost word for word"

    def evidence(*_: object, **__: object) -> list[list[Evidence]]:
        found: list[list[Evidence]] = [[] for _ in trajectory.steps]
        found[1] = [
            Evidence(1, "unsupported-argument", 0.7, lead),
            Evidence(1, "unsupported-argument", 0.7, second),
            Evidence(1, "repetition", 0.3, other),
        ]
        return found

    monkeypatch.setattr(learned_attributor, "step_evidence", evidence)
    result = await _attribute(trajectory)
    assert result.reason.count(ARGUMENT) == 1, result.reason
    # The next clause that says something new is still given.
    assert f"{lead}. Also, {other}." in result.reason, result.reason


# --- what a person reads --------------------------------------------------------------

FARES = '[{"flight": "TP 433", "eur": 89}, {"flight": "AF 1024", "eur": 140}]'
KEY_REFUSED = (
    '{"error": "Invalid API key provided. You must pass a valid key with the request.",'
    ' "code": 401, "docs": "https://example.invalid/errors/authentication"}'
)


def _fares_run() -> Trajectory:
    # The searcher calls AF 1024 the cheapest; the records it was given say TP 433 is.
    return Trajectory(
        run_id="fares",
        task="Find the cheapest Friday flight from CDG to LIS.",
        steps=(
            Step(index=0, agent="Planner", content="Searcher, list the Friday flights."),
            Step(index=1, agent="Searcher", kind=StepKind.TOOL, tool_name="flights.search",
                 tool_arguments='{"from": "CDG", "to": "LIS"}', content=FARES,
                 tool_result=FARES),
            Step(index=2, agent="Searcher", content="The cheapest flight is AF 1024."),
            Step(index=3, agent="Planner", content="Book AF 1024."),
        ),
    )  # fmt: skip


def _refused_key_run() -> Trajectory:
    return Trajectory(
        run_id="key",
        task="Fetch the weather in Lisbon.",
        steps=(
            Step(index=0, agent="Planner", content="Fetcher, get the Lisbon weather."),
            Step(index=1, agent="Fetcher", content="Calling the weather service for Lisbon."),
            Step(index=2, agent="weather_api", kind=StepKind.TOOL, tool_name="weather_api",
                 content=KEY_REFUSED, tool_result=KEY_REFUSED),
        ),
    )  # fmt: skip


def _quiet_run() -> Trajectory:
    return Trajectory(
        run_id="quiet",
        task="Summarise the meeting.",
        steps=(
            Step(index=0, agent="user", kind=StepKind.HUMAN, content="Summarise the meeting."),
            Step(index=1, agent="Planner", content="Plan: read the notes, then summarise."),
            Step(index=2, agent="Writer", content="The meeting agreed on the budget."),
        ),
    )


def _assert_plain(reason: str) -> None:
    """No model notes, no repr quoting, one or two sentences."""
    assert "(model:" not in reason and "typical step:" not in reason, reason
    assert not re.search(r"""["',]['"]""", reason), reason
    assert 1 <= len(re.findall(r"[.…”](?:\s|$)", reason)) <= 3, reason


@pytest.mark.parametrize("method", ["learned", "first_error"])
async def test_a_reason_names_the_agent_the_step_and_what_the_records_said(method: str) -> None:
    result = await get_attributor(method).attribute(_fares_run(), AttributeOptions())
    assert (result.agent, result.step) == ("Searcher", 2), result.reason
    _assert_plain(result.reason)
    assert "step 2" in result.reason and "Searcher called AF 1024 the cheapest" in result.reason
    # What it contradicts: the record the tool returned.
    assert "flights.search had returned TP 433 with eur 89" in result.reason


async def test_the_models_features_are_in_the_details_not_the_reason() -> None:
    result = await _attribute(_fares_run())
    features = result.details["model_features"]
    assert features and all(item["text"] not in result.reason for item in features)
    assert "evidence" not in result.details


@pytest.mark.parametrize("method", ["learned", "first_error"])
async def test_a_guess_says_it_is_one_and_names_the_step(method: str) -> None:
    result = await get_attributor(method).attribute(_quiet_run(), AttributeOptions())
    assert result.reason.startswith("A guess: "), result.reason
    assert f"step {result.step} ({result.agent})" in result.reason
    _assert_plain(result.reason)


async def test_a_quoted_error_is_cut_at_a_word_and_leaves_no_quoting_behind() -> None:
    result = await get_attributor("first_error").attribute(_refused_key_run(), AttributeOptions())
    assert (result.agent, result.step) == ("Fetcher", 1)
    assert result.reason.startswith("weather_api reported an error"), result.reason
    assert "at step 2, right after Fetcher acted at step 1" in result.reason
    quoted = result.reason[result.reason.index("“") + 1 : result.reason.rindex("”")]
    assert quoted.startswith('{"error": "Invalid API key provided.'), quoted
    # Cut after a whole word, marked with "…", never inside the JSON's quoting.
    assert quoted.endswith("…") and quoted[-2].isalnum(), quoted
    assert quoted.rstrip("…").split()[-1] in KEY_REFUSED.split()
    _assert_plain(result.reason)


def test_an_excerpt_keeps_whole_words_and_drops_what_a_cut_leaves_hanging() -> None:
    text = "the upload of report.pdf failed: quota exceeded for project alpha, retry later"
    at = text.index("quota")
    assert around(text, at, at + 5, margin=12) == "…failed: quota exceeded…"
    # A cut right after a JSON value leaves none of its quoting behind.
    reply = '{"detail": "quota exceeded", "retry": "never"}'
    at = reply.index("quota")
    assert around(reply, at, at + 5, margin=16) == '{"detail": "quota exceeded…'
    assert quoted('Error: "x" ' + "word " * 40, 30) == '“Error: "x" word word word…”'
    # Where a file lived on the machine that ran the agent is not shown.
    assert quoted('File "/home/runner/work/app/tools/fetch.py", line 3') == (
        '“File "fetch.py", line 3”'
    )


def test_a_simulated_users_withholding_names_the_user_the_step_and_their_words() -> None:
    found = UserWithheld(3, "customer", "user id", "ethan_martin_2396", "I don't have my user id")
    assert found.text() == (
        "At step 3, customer said they did not have their user id (“I don't have my user id”),"
        " though their instructions give it (ethan_martin_2396); the run never came by it"
        " afterwards."
    )


def test_an_llm_answer_whose_step_is_another_agents_says_so_and_keeps_both() -> None:
    run = Trajectory(
        run_id="terminal",
        task="Average the column.",
        steps=(
            Step(index=0, agent="DataAnalysis_Expert", content="```python\nprint(mean(rows))\n```"),
            Step(index=1, agent="Computer_terminal", kind=StepKind.TOOL,
                 content="exitcode: 1 (execution failed)\nNameError: name 'rows' is not defined"),
        ),
    )  # fmt: skip
    answer = Attribution(
        method="all_at_once", agent="DataAnalysis_Expert", step=1, reason="It used rows unset."
    )
    kept = with_step_owner(answer, run)
    assert (kept.agent, kept.step) == ("DataAnalysis_Expert", 1)
    assert kept.reason == (
        "The model named DataAnalysis_Expert; step 1 is Computer_terminal's report."
        " It used rows unset."
    )
    assert kept.details["step_agent"] == "Computer_terminal"
    same = answer.model_copy(update={"step": 0})
    assert with_step_owner(same, run) == same


def test_an_alarm_ranks_its_step_among_the_runs_steps_not_on_a_raw_score() -> None:
    # Two runs whose models score on different scales read the same way.
    for scale in (1.0, 25.0):
        scores = [scale * s for s in (-0.5, 0.1, -0.2, 0.9)]
        said = standing(scores, scores[-1], scale * 0.3)
        assert said == (
            "its score is higher than 3 of the 3 other steps seen so far (percentile 100),"
            " and the alarm line sits at percentile 75 of the 4 steps"
        )
    assert standing([0.4], 0.4, 0.1) == "it is the only step seen so far"
