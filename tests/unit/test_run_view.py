"""The run page's verdict, evidence links, marked phrases and span waterfall."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from faultfinder.attributors.auditor import MODEL_FEATURES, Alarm
from faultfinder.attributors.model import Attribution, Candidate, Step, StepKind, Trajectory
from faultfinder.server.api.dashboard.render import PALETTE, agent_colours
from faultfinder.server.api.dashboard.run_view import (
    EvidenceLink,
    alarm_text,
    evidence_links,
    highlights,
    model_features,
    verdict,
    waterfall,
)

START = datetime(2026, 1, 1, tzinfo=UTC)


def _trajectory() -> Trajectory:
    def at(ms: int) -> datetime:
        return START + timedelta(milliseconds=ms)

    flights = '[{"flight": "TP 433", "eur": 89}, {"flight": "AF 1024", "eur": 140}]'
    answer = "Checked the list. The cheapest flight is AF 1024. Done."
    tokens = {"input_tokens": 412, "output_tokens": 38}
    steps = (
        Step(index=0, agent="Planner", content="Searcher: list Friday flights CDG to LIS.",
             start_time=at(0), end_time=at(300), metadata=tokens),
        Step(index=1, agent="Searcher", kind=StepKind.TOOL, tool_name="flights.search",
             content=flights, start_time=at(300), end_time=at(800)),
        Step(index=2, agent="Planner", content=answer, start_time=at(1000), end_time=at(1000)),
    )  # fmt: skip
    return Trajectory(run_id="r", steps=steps)


def _answer() -> Attribution:
    return Attribution(
        method="learned",
        agent="Planner",
        step=2,
        reason="step 2: Planner called AF 1024 the cheapest after flights.search had returned"
        " TP 433 with eur 89 (model: numbers not seen earlier)",
        basis="contradicts-records",
        candidates=(
            Candidate(step=2, agent="Planner", score=0.8, evidence="Planner stated 'AF 1024'"),
            Candidate(step=0, agent="Planner", score=0.1, evidence="model score -0.2"),
        ),
        details={"why": ["Planner called AF 1024 the cheapest after flights.search had returned"
                         " TP 433 with eur 89"]},
    )  # fmt: skip


def test_the_verdict_is_one_line_of_evidence_without_the_models_notes() -> None:
    line = verdict(_answer())
    assert line is not None
    assert (line.agent, line.step, line.mode, line.mode_name) == (
        "Planner", 2, "R.2", "Reasoning error",
    )  # fmt: skip
    assert line.text.startswith("Planner called AF 1024 the cheapest") and "model:" not in line.text
    assert not line.is_guess
    assert verdict(_answer().model_copy(update={"basis": "guess"})).is_guess  # type: ignore[union-attr]
    assert verdict(None) is None


def test_evidence_links_point_at_their_steps_and_skip_bare_model_scores() -> None:
    links = evidence_links(_answer(), _trajectory())
    assert [(link.step, link.agent) for link in links] == [(2, "Planner"), (2, "Planner")]
    assert all("model score" not in link.text for link in links)


def test_the_phrase_the_evidence_cites_is_marked_within_its_sentence() -> None:
    trajectory = _trajectory()
    marked = highlights(evidence_links(_answer(), trajectory), trajectory)
    assert set(marked) == {2}
    found = marked[2]
    assert found.field == "content"
    assert found.phrase == "The cheapest flight is AF 1024."
    assert found.before + found.phrase + found.after == trajectory.steps[2].content


def test_the_waterfall_places_each_step_on_the_runs_time_axis() -> None:
    chart = waterfall(_trajectory().steps)
    assert chart.total_s == 1.0
    first, second, third = chart.rows
    assert (first.offset_s, first.duration_s, first.tokens) == (0.0, 0.3, 450)
    assert (second.left, second.width, second.tokens) == (30.0, 50.0, None)
    # An instant step keeps a visible tick inside the track.
    assert third.width > 0 and third.left + third.width <= 100
    assert chart.tokens == 450


def test_agents_on_one_page_never_share_a_colour_and_none_is_red() -> None:
    agents = [f"agent {n}" for n in range(len(PALETTE))]
    colours = agent_colours(agents)
    assert len(set(colours.values())) == len(agents)
    for colour in colours.values():
        red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
        assert not (red > 180 and green < 120 and blue < 120), f"{colour} reads as an error"


def test_the_models_features_and_the_steps_own_agent_ride_along_with_the_verdict() -> None:
    features = [{"feature": "new_numbers", "text": "numbers not seen earlier in the run: 2"}]
    answer = _answer().model_copy(
        update={"details": {"model_features": features, "step_agent": "Searcher"}}
    )
    line = verdict(answer)
    assert line is not None
    assert line.model_features == ("numbers not seen earlier in the run: 2",)
    assert line.step_agent == "Searcher" and line.agent == "Planner"
    assert model_features(_answer()) == [] and verdict(_answer()).step_agent is None  # type: ignore[union-attr]


def test_an_alarms_reason_keeps_the_models_features_apart() -> None:
    reason = (
        "Step 2 (Planner) raised the alarm: its score is higher than 1 of the 1 other steps"
        " seen so far (percentile 100), and the alarm line sits at percentile 50 of the 2"
        f" steps.{MODEL_FEATURES}characters: 40 (typical step: 20); a message."
    )
    alarm = Alarm(run_id="r", step=2, agent="Planner", score=2.9, threshold=2.5, steps_seen=3,
                  reason=reason)  # fmt: skip
    shown = alarm_text(alarm)
    assert shown is not None
    assert shown.lead.endswith("percentile 50 of the 2 steps.") and "typical" not in shown.lead
    assert shown.model_features == ("characters: 40 (typical step: 20)", "a message")
    assert alarm_text(None) is None


def test_a_quotation_cut_short_is_still_found_in_its_step() -> None:
    trajectory = _trajectory()
    cited = "Planner said “Checked the list. The cheapest flight…”"
    links = [EvidenceLink(2, "Planner", cited)]
    assert (
        highlights(links, trajectory)[2].phrase
        == "Checked the list. The cheapest flight is AF 1024."
    )
