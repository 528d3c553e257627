"""The online auditor: it alarms while a run streams in and never looks past the newest step."""

from __future__ import annotations

import math

import pytest

from faultfinder.attributors.auditor import Auditor
from faultfinder.attributors.learned import (
    ModelFormatError,
    StepModel,
    answerable_agents,
    default_model,
)
from faultfinder.attributors.learned.features import run_features, shows_evidence, step_features
from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.datasets import BenchmarkRecord


@pytest.fixture(scope="module")
def runs(who_and_when: list[BenchmarkRecord]) -> list[BenchmarkRecord]:
    records = who_and_when
    ag = next(r for r in records if r.subset == "algorithm-generated")
    hc = next(r for r in records if r.subset == "hand-crafted" and 25 <= len(r.trajectory) <= 40)
    return [ag, hc]


def prefix(trajectory: Trajectory, end: int) -> Trajectory:
    return trajectory.model_copy(update={"steps": trajectory.steps[:end]})


def stream(auditor: Auditor, trajectory: Trajectory) -> list[tuple[int, int]]:
    """Feed the run one step at a time; (steps seen, alarm step) for every alarm raised."""
    alarms = []
    for end in range(1, len(trajectory) + 1):
        alarm = auditor.observe(prefix(trajectory, end))
        if alarm is not None:
            alarms.append((end, alarm.step))
    return alarms


def test_streaming_scores_equal_scores_of_each_prefix_alone(runs: list[BenchmarkRecord]) -> None:
    model = default_model().auditor
    assert model is not None
    for record in runs:
        trajectory = record.trajectory
        auditor = Auditor(model)
        stream(auditor, trajectory)
        streamed = auditor.scores(trajectory.run_id)
        assert len(streamed) == len(trajectory)
        for end in range(1, len(trajectory) + 1):
            rows = step_features(prefix(trajectory, end), prefix_only=True)
            # the newest step scored against its prefix alone equals what streaming gave it
            assert model.scorer.score(rows[-1]) == streamed[end - 1]


def test_a_different_future_changes_nothing_about_the_past(runs: list[BenchmarkRecord]) -> None:
    trajectory = runs[1].trajectory
    cut = len(trajectory) // 2
    rewritten = tuple(
        step.model_copy(update={"content": "Traceback (most recent call last): boom " * 5})
        for step in trajectory.steps[cut:]
    )
    other_future = trajectory.model_copy(update={"steps": trajectory.steps[:cut] + rewritten})
    one, two = Auditor(), Auditor()
    stream(one, trajectory)
    stream(two, other_future)
    assert one.scores(trajectory.run_id)[:cut] == two.scores(trajectory.run_id)[:cut]
    assert one.scores(trajectory.run_id)[cut:] != two.scores(trajectory.run_id)[cut:]


def test_alarm_is_the_first_step_above_the_threshold_raised_when_it_arrives(
    runs: list[BenchmarkRecord],
) -> None:
    trajectory = runs[1].trajectory
    probe = Auditor()
    stream(probe, trajectory)
    scores = probe.scores(trajectory.run_id)
    threshold = sorted(scores)[len(scores) // 2]
    # An alarm needs a score above the threshold and a step that shows evidence itself.
    shows = [shows_evidence(row) for row in run_features(trajectory, prefix_only=True).named]
    expected = next(i for i, s in enumerate(scores) if s > threshold and shows[i])

    auditor = Auditor(threshold=threshold)
    alarms = stream(auditor, trajectory)
    assert alarms == [(expected + 1, expected)]  # once, as soon as the step arrived
    alarm = auditor.alarm(trajectory.run_id)
    assert alarm is not None
    assert alarm.agent == answerable_agents(trajectory.steps)[expected]
    assert alarm.score == scores[expected] and alarm.threshold == threshold

    # Step 0 of a Hand-Crafted run is the human's question: never alarmed on.
    assert trajectory.steps[0].kind is StepKind.HUMAN
    assert stream(Auditor(threshold=math.inf), trajectory) == []
    first = shows.index(True, 1)
    assert stream(Auditor(threshold=-math.inf), trajectory) == [(first + 1, first)]
    repeated = stream(Auditor(threshold=-math.inf, alarm_once=False), trajectory)
    assert [step for _, step in repeated] == [i for i in range(1, len(trajectory)) if shows[i]]
    assert not all(shows[1:]), "a step with nothing to show is never alarmed on"


def test_many_new_steps_at_once_alarm_on_the_earliest_crossing(
    runs: list[BenchmarkRecord],
) -> None:
    trajectory = runs[0].trajectory
    alarm = Auditor(threshold=-math.inf).observe(trajectory)
    assert alarm is not None and alarm.step == 0 and alarm.steps_seen == len(trajectory)


def test_a_prefix_that_does_not_extend_the_last_one_restarts_the_run() -> None:
    def run(first: str) -> Trajectory:
        return Trajectory(
            run_id="r",
            steps=(
                Step(index=0, agent="Coder", content=first),
                Step(index=1, agent="Computer_terminal", kind=StepKind.TOOL,
                     content="exitcode: 1 Traceback (most recent call last): KeyError"),
            ),
        )  # fmt: skip

    auditor = Auditor()
    auditor.observe(run("print(1)"))
    fresh = Auditor()
    fresh.observe(run("Let's assume the data and simulate it."))
    auditor.observe(run("Let's assume the data and simulate it."))
    assert auditor.scores("r") == fresh.scores("r")
    auditor.forget("r")
    assert auditor.scores("r") == [] and auditor.alarm("r") is None


def test_the_auditor_needs_a_prefix_only_model_and_a_threshold() -> None:
    full = default_model()
    without_auditor = StepModel(features=full.features, scorer=full.scorer)
    with pytest.raises(ValueError, match="no prefix-only auditor"):
        Auditor(without_auditor)
    assert full.auditor is not None
    no_threshold = StepModel(
        features=full.auditor.features, scorer=full.auditor.scorer, prefix_only=True
    )
    with pytest.raises(ValueError, match="no alarm threshold"):
        Auditor(no_threshold)
    assert Auditor(no_threshold, threshold=0.5).threshold == 0.5


def test_a_run_of_a_framework_with_its_own_threshold_alarms_by_it(
    runs: list[BenchmarkRecord],
) -> None:
    trajectory = runs[1].trajectory
    pooled = default_model().auditor
    assert pooled is not None
    probe = Auditor(pooled, threshold=math.inf)
    stream(probe, trajectory)
    scores = probe.scores(trajectory.run_id)
    low = sorted(scores)[len(scores) // 2]
    model = StepModel(
        features=pooled.features,
        scorer=pooled.scorer,
        prefix_only=True,
        alarm_threshold=math.inf,  # the pooled threshold never alarms
        alarm_thresholds={"magentic-one": low},
    )
    framework = trajectory.metadata.get("framework")
    assert framework == "magentic-one"
    expected = next(i for i, s in enumerate(scores) if s > low)
    auditor = Auditor(model)
    assert stream(auditor, trajectory) == [(expected + 1, expected)]
    alarm = auditor.alarm(trajectory.run_id)
    assert alarm is not None and alarm.threshold == low
    # A run that names no framework (or another one) gets the pooled threshold.
    anonymous = trajectory.model_copy(update={"metadata": {}, "run_id": "anonymous"})
    assert stream(Auditor(model), anonymous) == []
    # An explicit threshold applies to every run.
    assert stream(Auditor(model, threshold=math.inf), trajectory) == []


def test_per_framework_thresholds_survive_a_round_trip_and_bad_ones_are_named() -> None:
    pooled = default_model().auditor
    assert pooled is not None
    model = StepModel(
        features=pooled.features,
        scorer=pooled.scorer,
        prefix_only=True,
        alarm_threshold=0.5,
        alarm_thresholds={"ag2": 0.25, "magentic-one": 1.5},
    )
    loaded = StepModel.from_dict(model.to_dict())
    assert loaded.alarm_thresholds == {"ag2": 0.25, "magentic-one": 1.5}
    assert loaded.threshold_for("ag2") == 0.25 and loaded.threshold_for("other") == 0.5
    data = model.to_dict()
    data["alarm_thresholds"] = {"ag2": "high"}
    with pytest.raises(ModelFormatError, match="alarm_thresholds"):
        StepModel.from_dict(data)


def test_no_alarm_on_the_task_or_system_prompt_and_a_tool_report_names_its_caller() -> None:
    steps = (
        Step(index=0, agent="system", kind=StepKind.SYSTEM, content="You are a helpful team."),
        Step(index=1, agent="user", kind=StepKind.HUMAN, content="Count the rows of data.csv."),
        Step(index=2, agent="Coder", content="```python\nprint(len(load('data.csv')))\n```"),
        Step(index=3, agent="Computer_terminal", kind=StepKind.TOOL,
             content="exitcode: 1 Traceback (most recent call last): KeyError: 'rows'"),
    )  # fmt: skip
    trajectory = Trajectory(run_id="r", task="Count the rows of data.csv.", steps=steps)
    everything = stream(Auditor(threshold=-math.inf, alarm_once=False), trajectory)
    # The code shows nothing wrong when it arrives; the terminal's traceback does, and
    # answers to the Coder who ran it.
    assert [step for _, step in everything] == [3]
    tool_only = Auditor(threshold=-math.inf).observe(
        trajectory.model_copy(
            update={"steps": (*steps[:2], steps[3].model_copy(update={"index": 2}))}
        )
    )
    # a tool report with no agent step before it answers for itself
    assert tool_only is not None and tool_only.step == 2 and tool_only.agent == "Computer_terminal"
    auditor = Auditor(threshold=-math.inf, alarm_once=False)
    auditor.observe(prefix(trajectory, 3))
    alarm = auditor.observe(trajectory)
    assert alarm is not None and alarm.step == 3 and alarm.agent == "Coder"
