"""The `learned` attributor: the packaged model, valid attributions on real runs, who
answers for a blamed step, the reason it gives, and the steps that are never blamed.
Its model file is in test_learned_model_file.py, its training in test_learned_training.py."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from faultfinder.attributors.base import AttributeOptions, available_attributors, get_attributor
from faultfinder.attributors.learned import (
    AgentRule,
    LearnedAttributor,
    LinearScorer,
    StepModel,
    answerable_agents,
    blameable,
    blameable_agents,
    default_model,
    softmax,
)
from faultfinder.attributors.learned.features import FEATURE_LABELS, feature_names
from faultfinder.attributors.model import (
    AttributionStatus,
    Step,
    StepKind,
    Trajectory,
    validate_against,
)
from faultfinder.datasets import BenchmarkRecord, load_dataset
from faultfinder.training import TEMPERATURES, RunMatrix, choose_temperature
from tests.learned_records import synthetic_records

OPTIONS = AttributeOptions()


def test_learned_is_registered_and_uses_the_packaged_model() -> None:
    assert "learned" in available_attributors()
    attributor = get_attributor("learned")
    assert isinstance(attributor, LearnedAttributor)
    assert attributor.model is default_model()
    assert attributor.model.features == feature_names()
    assert attributor.model.conformal is not None
    assert attributor.model.auditor is not None and attributor.model.auditor.prefix_only


async def test_valid_attributions_on_real_runs_including_the_longest(
    who_and_when: list[BenchmarkRecord],
) -> None:
    by_subset: dict[str, list[BenchmarkRecord]] = {}
    for record in who_and_when:
        by_subset.setdefault(record.subset, []).append(record)
    longest = max(who_and_when, key=lambda r: len(r.trajectory))
    assert len(longest.trajectory) >= 130
    chosen = by_subset["algorithm-generated"][:4] + by_subset["hand-crafted"][:4] + [longest]
    attributor = get_attributor("learned")
    for record in chosen:
        trajectory = record.trajectory
        result = await attributor.attribute(trajectory, OPTIONS)
        assert result.status is AttributionStatus.OK, result.failure_reason
        assert validate_against(result, trajectory) is None
        assert result.llm_calls == 0 and result.method == "learned"
        assert result.used_ground_truth
        # Candidates rank by the model's score; only the leader may be one evidence put first.
        bands = result.details["evidence_bands"]
        scores = [c.score for c in result.candidates]
        assert scores[1:] == sorted(scores[1:], reverse=True)
        if any(band == 3 for band in bands):
            assert bands[result.candidates[0].step] == 3
        assert result.candidates[0].step == result.step
        mass = result.details["agent_mass"]
        if result.details["agent_rule"] == AgentRule.TOP_STEP:
            assert result.agent == answerable_agents(trajectory.steps)[result.step]
        else:
            assert mass[result.agent] == max(mass.values())
        probabilities = result.details["step_probabilities"]
        assert len(probabilities) == len(trajectory)
        assert sum(probabilities) == pytest.approx(1.0, abs=1e-4)
        assert result.confidence == pytest.approx(
            min(probabilities[result.step], 0.1 if result.basis == "guess" else 1.0), abs=1e-4
        )
        interval = result.prediction_set
        assert interval is not None and interval.alpha == 0.1
        assert 0 <= interval.lo <= interval.hi < len(trajectory)


def test_the_packaged_model_names_the_agent_answering_for_the_blamed_step(
    who_and_when: list[BenchmarkRecord],
) -> None:
    attributor = LearnedAttributor(default_model())
    for record in who_and_when[::3]:
        result = attributor.attribute_now(record.trajectory, OPTIONS)
        assert result.step is not None
        assert result.agent == answerable_agents(record.trajectory.steps)[result.step]


async def test_without_ground_truth_the_answer_cannot_matter(
    who_and_when: list[BenchmarkRecord],
) -> None:
    record = next(r for r in who_and_when if r.subset == "algorithm-generated")
    attributor = LearnedAttributor()
    blind = AttributeOptions(use_ground_truth=False)
    one = await attributor.attribute(record.trajectory, blind)
    other = await attributor.attribute(
        record.trajectory.model_copy(update={"ground_truth": "something else entirely 991"}),
        blind,
    )
    assert not one.used_ground_truth
    assert one.details["step_probabilities"] == other.details["step_probabilities"]


async def test_the_task_giver_and_the_system_prompt_are_never_blamed(datasets_dir: Path) -> None:
    # Who&When Pro's EVA trace opens with a system prompt, a kind of step the Who&When
    # training runs never had; it must not take the blame (it did: "system", step 0).
    pro = {r.record_id: r for r in load_dataset("who_and_when_pro", datasets_dir)}
    eva = pro["eva/lvbench_camel"].trajectory
    assert [s.kind for s in eva.steps[:2]] == [StepKind.SYSTEM, StepKind.HUMAN]
    for record in pro.values():
        trajectory = record.trajectory
        result = await LearnedAttributor().attribute(trajectory, OPTIONS)
        assert result.status is AttributionStatus.OK
        outsiders = [
            i for i, s in enumerate(trajectory.steps) if s.kind in (StepKind.HUMAN, StepKind.SYSTEM)
        ]
        assert outsiders, record.record_id
        assert result.step not in outsiders
        assert all(result.details["step_probabilities"][i] == 0.0 for i in outsiders)
        assert all(c.step not in outsiders for c in result.candidates)
        assert result.agent in trajectory.roster
        assert result.agent not in ("system", "user", "tool")


async def test_a_tool_report_is_answered_for_by_the_agent_that_called_the_tool() -> None:
    # A scorer that blames the step with the error in it ranks the terminal's report
    # first; the error answers to the step that ran the code, and the agent answering
    # for it is the one that ran the code, not the terminal.
    names = feature_names()
    weights = [1.0 if name == "error_in_step" else 0.0 for name in names]
    errors = StepModel(
        features=names,
        scorer=LinearScorer(mean=(0.0,) * len(names), scale=(1.0,) * len(names),
                            weights=tuple(weights)),
        agent_rule=AgentRule.TOP_STEP,
    )  # fmt: skip
    trajectory = synthetic_records(1)[0].trajectory
    result = LearnedAttributor(errors).attribute_now(trajectory, OPTIONS)
    assert result.step is not None
    blamed = trajectory.steps[result.step]
    assert "Traceback" in trajectory.steps[result.step + 1].content
    assert result.agent == blamed.agent == "Coder"
    assert result.details["overruled_step"] == result.step + 1
    assert result.details["agent_mass"].get("Computer_terminal", 0.0) == 0.0
    # The candidates name the answering agent too, and the reason says why the step: the
    # error the terminal reported right after it.
    assert "Computer_terminal" not in {c.agent for c in result.candidates}
    assert result.basis == "tool-error"
    assert (
        "Computer_terminal reported an error (traceback) at step 7, right after Coder acted at"
        " step 6" in result.reason
    )


def test_the_agent_mass_does_not_move_with_the_conformal_temperature() -> None:
    # The planner's one step scores 1, the coder's three steps 0. At temperature 1 (where
    # training chose the agent rule) the coder holds more mass (3 / (3 + e) > 1/2); a
    # sharp temperature fitted for the conformal sets must not hand the run to the planner.
    names = feature_names()
    weights = [1.0 if name == "agent_is_first_speaker" else 0.0 for name in names]
    trajectory = Trajectory(
        run_id="mass",
        task="Add the numbers.",
        steps=(
            Step(index=0, agent="Planner", content="Plan: add them."),
            Step(index=1, agent="Coder", content="print(1 + 2)"),
            Step(index=2, agent="Coder", content="The sum is 3."),
            Step(index=3, agent="Coder", content="Done."),
        ),
    )
    answers = {}
    for temperature in (1.0, 0.1):
        model = StepModel(
            features=names,
            scorer=LinearScorer(mean=(0.0,) * len(names), scale=(1.0,) * len(names),
                                weights=tuple(weights)),
            agent_rule=AgentRule.AGENT_MASS,
            temperature=temperature,
        )  # fmt: skip
        result = LearnedAttributor(model).attribute_now(trajectory, OPTIONS)
        answers[temperature] = (result.step, result.agent, result.details["agent_mass"])
        probabilities = result.details["step_probabilities"]
        assert probabilities[0] == pytest.approx(softmax([1.0, 0, 0, 0], temperature)[0], abs=1e-5)
    assert answers[1.0] == answers[0.1]
    step, agent, mass = answers[0.1]
    assert (step, agent) == (0, "Coder")
    assert mass["Coder"] == pytest.approx(3 / (3 + math.e), abs=1e-5)


def test_temperature_is_fitted_by_the_likelihood_of_the_gold_steps() -> None:
    # Gold always scored highest by a clear margin: a sharp temperature is likeliest. Gold
    # at random: the flattest one is.
    rng = random.Random(0)
    sharp: list[tuple[RunMatrix, list[float]]] = []
    flat: list[tuple[RunMatrix, list[float]]] = []
    for i in range(40):
        n = 8
        gold = rng.randrange(n)
        informative = [0.0] * n
        informative[gold] = 3.0
        noise = [rng.gauss(0.0, 3.0) for _ in range(n)]
        for runs, scores in ((sharp, informative), (flat, noise)):
            run = RunMatrix(
                record_id=str(i), subset="s", group=None, rows=np.zeros((n, 1)),
                gold_step=gold, gold_agent="a", agents=("a",) * n, blameable=(True,) * n,
            )  # fmt: skip
            runs.append((run, scores))
    assert choose_temperature([r for r, _ in sharp], [s for _, s in sharp]) == min(TEMPERATURES)
    assert choose_temperature([r for r, _ in flat], [s for _, s in flat]) == max(TEMPERATURES)


def test_the_details_name_what_sets_the_blamed_step_apart(
    who_and_when: list[BenchmarkRecord],
) -> None:
    model = default_model()
    for record in who_and_when[::23]:
        result = LearnedAttributor(model).attribute_now(record.trajectory, OPTIONS)
        evidence = result.details["model_features"]
        assert 1 <= len(evidence) <= 3, record.record_id
        drops = [e["score_drop"] for e in evidence]
        assert drops == sorted(drops, reverse=True) and drops[-1] > 0
        assert len({e["text"] for e in evidence}) == len(evidence)
        for item in evidence:
            assert item["feature"] in FEATURE_LABELS
            assert item["value"] != item["typical"]
        # The model's own list stays in the details; the reason is for a person.
        assert "(model:" not in result.reason and "typical step:" not in result.reason


def test_every_feature_has_a_label_a_reader_can_follow() -> None:
    assert set(FEATURE_LABELS) == set(feature_names())
    assert {shown for _, shown in FEATURE_LABELS.values()} <= {
        "flag", "int", "log1p", "share", "strength", "ratio",
    }  # fmt: skip


def test_masked_softmax_and_the_blameable_steps() -> None:
    assert softmax([1.0, 2.0, 3.0], mask=[True, False, True]) == pytest.approx(
        [*softmax([1.0, 3.0])[:1], 0.0, softmax([1.0, 3.0])[1]]
    )
    with pytest.raises(ValueError, match="2 entries for 3 scores"):
        softmax([1.0, 2.0, 3.0], mask=[True, False])
    with pytest.raises(ValueError, match="keeps no step"):
        softmax([1.0], mask=[False])
    human = Step(index=0, agent="user", kind=StepKind.HUMAN, content="Count the rows.")
    system = Step(index=1, agent="system", kind=StepKind.SYSTEM, content="Be careful.")
    coder = Step(index=2, agent="Coder", content="print(1)")
    terminal = Step(index=3, agent="Computer_terminal", kind=StepKind.TOOL, content="1")
    assert blameable([human, system, coder, terminal]) == [False, False, True, True]
    # a run with nothing but the task and a system prompt still has a candidate
    assert blameable([human, system]) == [True, True]
    assert answerable_agents([terminal, human, coder, terminal, human]) == [
        "Computer_terminal", "user", "Coder", "Coder", "Coder",
    ]  # fmt: skip
    # A tool call recorded under its caller's name (an agent acting in the run) is the
    # caller's own; under a name that never acts, it answers to the agent before it.
    handoff = Step(index=0, agent="Planner", kind=StepKind.HANDOFF, content="Coder: count.")
    coders_call = Step(index=1, agent="Coder", kind=StepKind.TOOL, content="1")
    assert answerable_agents([handoff, coders_call, coder]) == ["Planner", "Coder", "Coder"]
    assert answerable_agents([handoff, coders_call]) == ["Planner", "Planner"]
    # Who may be named: the agents answering for blameable steps, then the declared team.
    run = Trajectory(run_id="r", steps=tuple(
        s.model_copy(update={"index": i}) for i, s in enumerate([human, system, coder, terminal])
    ))  # fmt: skip
    assert blameable_agents(run) == ("Coder",)
    assert run.declared_roster == ()
    declared = run.model_copy(update={"metadata": {"roster": ["Planner", "Coder"]}})
    assert blameable_agents(declared) == ("Coder", "Planner")
    assert declared.roster == declared.declared_roster == ("Planner", "Coder")


async def test_empty_trajectory_fails_with_a_reason() -> None:
    result = await LearnedAttributor().attribute(Trajectory(run_id="empty"), OPTIONS)
    assert result.status is AttributionStatus.FAILED
    assert "no steps" in (result.failure_reason or "")
