"""The trivial baselines every accuracy is quoted beside: the last agent step, and the rule
cascade (first error shown, else first figure nothing before it shows, else first agent
step, marked a guess)."""

from __future__ import annotations

import asyncio

from faultfinder.attributors.base import AttributeOptions, get_attributor
from faultfinder.attributors.model import Attribution, Step, StepKind, Trajectory

OPTIONS = AttributeOptions()


def _trajectory(*steps: tuple[str, StepKind, str], task: str = "") -> Trajectory:
    return Trajectory(
        run_id="run-1",
        task=task,
        steps=tuple(
            Step(index=i, agent=agent, kind=kind, content=content)
            for i, (agent, kind, content) in enumerate(steps)
        ),
    )


def _answer(name: str, trajectory: Trajectory) -> Attribution:
    return asyncio.run(get_attributor(name).attribute(trajectory, OPTIONS))


HOTEL = _trajectory(
    ("user", StepKind.HUMAN, "Book the cheapest room in Valencia for 3 nights."),
    ("Planner", StepKind.MESSAGE, "Searcher, find hotels in Valencia for 3 nights."),
    ("Searcher", StepKind.MESSAGE, "Calling search_hotels(city='Valencia')."),
    ("search_hotels", StepKind.TOOL, "Hotel Turia: EUR 142 a night; Hotel Mar: EUR 168 a night"),
    ("Searcher", StepKind.MESSAGE, "Hotel Turia is cheapest at EUR 104 a night."),
    ("Planner", StepKind.MESSAGE, "Booked Hotel Turia, 3 nights, EUR 312 in total."),
    task="Book the cheapest room in Valencia for 3 nights.",
)


def test_the_cascade_blames_the_first_figure_nothing_before_it_shows() -> None:
    answer = _answer("cascade", HOTEL)
    assert (answer.agent, answer.step) == ("Searcher", 4)
    assert answer.basis == "unsupported-figure" and "104" in answer.reason


def test_the_cascade_takes_an_error_the_run_shows_first() -> None:
    crashed = _trajectory(
        ("user", StepKind.HUMAN, "How many rows has orders.csv?"),
        ("Coder", StepKind.MESSAGE, "```python\nprint(len(open('order.csv').readlines()))\n```"),
        (
            "terminal",
            StepKind.TOOL,
            "Traceback (most recent call last):\nFileNotFoundError: [Errno 2] No such file"
            " or directory: 'order.csv'",
        ),
        ("Reviewer", StepKind.MESSAGE, "The file has 1,204 rows."),
    )
    answer = _answer("cascade", crashed)
    assert (answer.agent, answer.step) == ("Coder", 1)
    assert answer.basis == "error"


def test_with_nothing_to_go_on_the_cascade_guesses_the_first_agent_step() -> None:
    quiet = _trajectory(
        ("user", StepKind.HUMAN, "Summarise the meeting notes."),
        ("Reader", StepKind.MESSAGE, "The notes cover the launch plan and the budget."),
        ("Writer", StepKind.MESSAGE, "Summary: launch plan agreed, budget pending."),
    )
    answer = _answer("cascade", quiet)
    assert (answer.agent, answer.step, answer.basis) == ("Reader", 1, "guess")


def test_the_last_agent_step_is_the_last_step_an_agent_decided() -> None:
    answer = _answer("last_agent_step", HOTEL)
    assert (answer.agent, answer.step, answer.basis) == ("Planner", 5, "guess")
    tool_last = _trajectory(*[(s.agent, s.kind, s.content) for s in HOTEL.steps[:4]])
    assert _answer("last_agent_step", tool_last).step == 2
