"""`faultfinder dataset stats`: where a set's labels sit and what comes before them, read
from runs written here in several frameworks' shapes."""

from __future__ import annotations

import json

from click.testing import CliRunner

from faultfinder.attributors.model import Step, StepKind, StepStatus, Trajectory
from faultfinder.datasets.command import stats
from faultfinder.datasets.realism import run_shape, set_stats
from faultfinder.datasets.records import BenchmarkRecord, GoldLabel


def _run(*steps: tuple[str, StepKind, str], task: str = "Book the 09:40 to Oslo.") -> Trajectory:
    return Trajectory(
        run_id="r",
        task=task,
        steps=tuple(
            Step(index=i, agent=agent, kind=kind, content=text)
            for i, (agent, kind, text) in enumerate(steps)
        ),
    )


def test_a_noisy_prefix_is_seen_before_the_label() -> None:
    # A LangGraph-like team: the search tool fails, is retried and answers; the planner
    # apologises, then states a fare nobody showed; the booker books the wrong flight.
    run = _run(
        ("planner", StepKind.MESSAGE, "I will look up the flights first."),
        ("search", StepKind.TOOL, "Error: upstream timeout"),
        ("planner", StepKind.MESSAGE, "Sorry, let me try again."),
        ("search", StepKind.TOOL, "SK811 09:40 NOK 1290; SK813 11:40 NOK 990"),
        ("planner", StepKind.MESSAGE, "The cheapest is NOK 870, so SK813."),
        ("booker", StepKind.MESSAGE, "Booked SK813 at 11:40."),
    )
    steps = list(run.steps)
    steps[1] = steps[1].model_copy(update={"tool_name": "search", "status": StepStatus.ERROR})
    steps[3] = steps[3].model_copy(update={"tool_name": "search"})
    run = run.model_copy(update={"steps": tuple(steps)})
    shape = run_shape(run, 5)
    assert (shape.steps, shape.agents, shape.agent_turns) == (6, 2, 4)
    assert shape.label_position == 1.0 and shape.label_turn == 3
    assert shape.error_before and shape.recovered_error_before
    assert shape.apology_before and shape.unsupported_figure_before


def test_a_clean_prefix_has_nothing_before_the_label() -> None:
    # A pydantic-ai-like delegation, the flaw in the first turn: nothing misleads before it.
    run = _run(
        ("user", StepKind.HUMAN, "What is 12 + 30?"),
        ("analyst", StepKind.MESSAGE, "12 + 30 = 52."),
        ("analyst", StepKind.MESSAGE, "The answer is 52."),
        task="What is 12 + 30?",
    )
    shape = run_shape(run, 1)
    assert shape.label_turn == 0 and shape.label_position == 0.5
    assert not (shape.error_before or shape.apology_before or shape.unsupported_figure_before)


def test_each_subset_and_the_whole_set_get_a_row() -> None:
    run = _run(("a", StepKind.MESSAGE, "x"), ("b", StepKind.MESSAGE, "y"))
    records = [
        BenchmarkRecord("d", subset, f"{subset}/{n}", run, GoldLabel("a", 0, mode="R.1"))
        for n, subset in enumerate(["one", "one", "two"])
    ]
    rows = [found.as_dict() for found in set_stats(records, "d")]
    assert [(row["set"], row["runs"]) for row in rows] == [("d/one", 2), ("d/two", 1), ("d", 3)]
    assert rows[-1]["pct_label_in_first_3_turns"] == 100.0 and rows[-1]["modes"] == 1


def test_the_command_prints_a_table_or_json() -> None:
    shown = CliRunner().invoke(stats, ["data/corpus/natural"])
    assert shown.exit_code == 0, shown.output
    header, rule, *rows = shown.output.splitlines()
    assert header.startswith("| set | runs |") and rule.startswith("|---|")
    assert rows[-1].startswith("| data/corpus/natural |")
    as_json = CliRunner().invoke(stats, ["data/corpus/natural", "--json"])
    assert json.loads(as_json.output)[-1]["runs"] >= 28
