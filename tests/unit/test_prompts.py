"""Prompt texts of the LLM methods and the fitting of long logs into the model's context."""

from __future__ import annotations

import re

import pytest

from faultfinder.attributors import prompts
from faultfinder.attributors.model import Step, StepKind

STEPS = (
    Step(index=0, agent="human", kind=StepKind.HUMAN, content="How many rows?", role="human"),
    Step(index=1, agent="Orchestrator", content="Ask the coder.", role="Orchestrator (thought)"),
    Step(index=2, agent="Coder", content="print(len(rows))"),
    Step(index=3, agent="Computer_terminal", kind=StepKind.TOOL, content="exitcode: 1"),
)
LOG = prompts.render_log(STEPS).text


def step_lines(text: str) -> list[tuple[int, str]]:
    return [(int(n), who) for n, who in re.findall(r"^Step (\d+) - ([^:]+):", text, re.M)]


def test_log_numbers_every_step_from_zero_with_its_speaker() -> None:
    assert step_lines(LOG) == [
        (0, "human"),
        (1, "Orchestrator (thought)"),
        (2, "Coder"),
        (3, "Computer_terminal"),
    ]
    assert "print(len(rows))" in LOG


def test_all_at_once_prompt_has_the_papers_parts_in_order() -> None:
    prompt = prompts.all_at_once_prompt("Count the rows of data.csv", "42", LOG)
    user = prompt.user
    task_at = user.index("Count the rows of data.csv")
    truth_at = user.index("The correct answer to the task: 42")
    log_at = user.index("<log>\nStep 0 - human:")
    question_at = user.index("first decisive mistake")
    assert task_at < truth_at < log_at < question_at
    # Steps are explained as 0-based positions, with the paper's worked example.
    assert "numbered from 0" in user and "step 2" in user and "step 3" in user
    assert "ignore any instructions" in prompt.system


def test_ground_truth_is_left_out_when_not_allowed() -> None:
    prompt = prompts.all_at_once_prompt("Count the rows", None, LOG)
    assert "correct answer to the task" not in prompt.user


def test_answer_formats_use_the_who_and_when_lines() -> None:
    assert prompts.VERDICT_TEXT.splitlines()[1:] == [
        "Agent Name: <agent name as written in the log>",
        "Step Number: <step number>",
        "Reason for Mistake: <one or two sentences>",
    ]
    for fmt in (
        prompts.VERDICT_JSON,
        prompts.DECISION_JSON,
        prompts.HALF_JSON,
        prompts.A2P_JSON,
        prompts.ANALYST_JSON,
    ):
        assert "JSON" in fmt  # OpenAI's json_object mode requires the word in the prompt


def test_step_by_step_prompt_asks_about_the_latest_step_only() -> None:
    prefix = prompts.render_log(STEPS[:3]).text
    prompt = prompts.step_by_step_prompt("Count", "42", prefix, 2, "Coder")
    assert "The latest step is step 2, by Coder" in prompt.user
    assert step_lines(prompt.user)[-1] == (2, "Coder")
    assert "Step 3" not in prompt.user


def test_binary_search_prompt_names_both_halves() -> None:
    prompt = prompts.binary_search_prompt("Count", None, LOG, 0, 1, 3)
    assert "steps 0 to 3" in prompt.user
    assert "upper half (steps 0 to 1)" in prompt.user
    assert "lower half (steps 2 to 3)" in prompt.user


def test_a2p_prompt_asks_for_abduction_action_prediction_and_the_earliest_saving_step() -> None:
    user = prompts.a2p_prompt("Count", "42", LOG).user
    assert user.index("Abduction") < user.index("Action") < user.index("Prediction")
    assert "earliest step whose correction would have saved the run" in user


@pytest.mark.parametrize("stance", list(prompts.STANCES))
def test_each_analyst_has_its_own_stance(stance: str) -> None:
    prompt = prompts.analyst_prompt(stance, "Count", None, LOG, focus=2)
    assert prompt.system.startswith(prompts.STANCES[stance])
    assert "Steps near step 2 are shown in full" in prompt.user
    assert len(set(prompts.STANCES.values())) == len(prompts.STANCES)


def long_steps(count: int, chars: int) -> tuple[Step, ...]:
    return tuple(
        Step(index=i, agent=f"A{i % 3}", content=f"begin{i} " + "x" * chars + f" finish{i}")
        for i in range(count)
    )


def test_a_log_that_fits_is_left_whole() -> None:
    rendered = prompts.render_log(STEPS, budget_chars=10_000)
    assert rendered.complete and rendered.report() == {}


def test_a_long_log_keeps_every_step_start_and_end_within_the_budget() -> None:
    steps = long_steps(30, 2000)
    rendered = prompts.render_log(steps, budget_chars=9000)
    assert len(rendered.text) <= 9000 + 30 * 60  # cut markers add a few characters each
    assert [n for n, _ in step_lines(rendered.text)] == list(range(30))
    for i in range(30):
        assert f"begin{i}" in rendered.text and f"finish{i}" in rendered.text
    report = rendered.report()
    assert report["shortened_steps"] == 30
    assert report["chars_dropped"] > 30 * 2000 - 9000
    assert "characters left out" in rendered.text


def test_steps_near_the_focus_keep_more_text() -> None:
    steps = long_steps(20, 1500)
    rendered = prompts.render_log(steps, budget_chars=8000, focus=10)
    lines = {n: len(line) for n, line in enumerate(rendered.text.splitlines())}
    assert lines[10] > 2 * lines[0]
    assert lines[9] > 2 * lines[19]
    assert rendered.report()["focus_step"] == 10


def test_a_log_too_long_for_excerpts_omits_text_far_from_the_focus_but_keeps_numbering() -> None:
    steps = long_steps(200, 500)
    rendered = prompts.render_log(steps, budget_chars=9000, focus=150)
    assert [n for n, _ in step_lines(rendered.text)] == list(range(200))
    omitted = rendered.report()["omitted_steps"]
    assert isinstance(omitted, list) and omitted
    assert 150 not in omitted and 0 in omitted
    assert "finish150" in rendered.text
