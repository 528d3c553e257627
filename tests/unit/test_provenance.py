"""Value provenance and the evidence it gives: which figures an agent states that nothing
observed supports, on runs shaped as any framework would record them."""

from __future__ import annotations

import asyncio

import pytest

from faultfinder.attributors.base import AttributeOptions
from faultfinder.attributors.heuristics import FirstError
from faultfinder.attributors.learned import LearnedAttributor
from faultfinder.attributors.learned.evidence import step_evidence
from faultfinder.attributors.learned.features import run_features
from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.attributors.provenance import Provenance, derivable


def run(
    *steps: tuple[str, StepKind, str],
    final: str | None = None,
    metadata: dict[str, object] | None = None,
) -> Trajectory:
    return Trajectory(
        run_id="r",
        task="How many people live in Oslo?",
        final_answer=final,
        steps=tuple(
            Step(index=i, agent=agent, kind=kind, content=content)
            for i, (agent, kind, content) in enumerate(steps)
        ),
        metadata=metadata or {},
    )


M, T, H = StepKind.MESSAGE, StepKind.TOOL, StepKind.HUMAN

CENSUS = run(
    ("user", H, "How many people live in Oslo?"),
    ("Coordinator", M, "ask_researcher(question='population of Oslo')"),
    ("Researcher", M, "census_lookup(city='Oslo')"),
    ("census_lookup", T, "Oslo: 522,250 residents (census)"),
    ("Researcher", M, "Oslo has 225,520 residents."),
    ("Coordinator", M, "The population of Oslo is 225,520."),
    final="225,520",
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (417097.0, True),  # a difference
        (1000977.0, True),  # a sum
        (242.87, True),  # a ratio as a percentage
        (709.037, True),  # thousands
        (440.6, True),  # km to miles
        (417197.0, False),  # a slip
        (2100000.0, False),  # made up
    ],
)
def test_a_figure_is_supported_by_one_calculation_or_conversion(
    value: float, expected: bool
) -> None:
    assert derivable(value, [709037.0, 291940.0, 709.1, 12.5]) is expected


def test_a_figure_contradicting_the_tool_report_is_caught_and_named() -> None:
    provenance = Provenance(CENSUS.task)
    facts = [provenance.push(step, step.kind is M) for step in CENSUS.steps]
    assert facts[4].contradicts and facts[4].answered == "census_lookup"
    assert facts[4].unsupported == ("225,520",) == facts[4].introduced
    assert facts[4].answered_figures == ("522,250",)
    # The Coordinator only repeats the figure: unsupported, but not its invention.
    assert facts[5].unsupported == ("225,520",) and facts[5].introduced == ()
    assert not facts[1].unsupported and not facts[2].unsupported


def test_a_relayed_or_computed_figure_is_no_evidence() -> None:
    relayed = run(
        ("user", H, "How many more people live in Oslo than in Bergen?"),
        ("Researcher", M, "lookup(city='Oslo')"),
        ("lookup", T, "709,037"),
        ("Researcher", M, "lookup(city='Bergen')"),
        ("lookup", T, "291,940"),
        ("Analyst", M, "Oslo has 709,037 and Bergen 291,940: 417,097 more."),
    )
    evidence = step_evidence(relayed, run_features(relayed))
    assert all(not items for items in evidence)


def test_evidence_names_agents_tools_and_figures() -> None:
    evidence = step_evidence(CENSUS, run_features(CENSUS))
    top = evidence[4][0]
    assert top.kind == "contradicts-report" and top.strength == 1.0
    assert top.text == "Researcher stated 225,520 right after census_lookup returned 522,250"
    assert [e.kind for e in evidence[4]][:2] == ["contradicts-report", "made-up-final-answer"]


def test_the_learned_default_blames_the_contradicting_step_and_says_why() -> None:
    attribution = LearnedAttributor().attribute_now(CENSUS, AttributeOptions())
    assert (attribution.agent, attribution.step) == ("Researcher", 4)
    assert "census_lookup returned 522,250" in attribution.reason
    assert attribution.details["guess"] is False


def test_without_any_evidence_the_learned_answer_says_it_is_a_guess() -> None:
    quiet = run(
        ("user", H, "Summarise the meeting."),
        ("Planner", M, "Plan: read the notes, then summarise."),
        ("Writer", M, "The meeting agreed on the budget."),
    )
    attribution = LearnedAttributor().attribute_now(quiet, AttributeOptions())
    assert attribution.details["guess"] is True
    assert attribution.reason.startswith("A guess:")
    assert attribution.confidence is not None and attribution.confidence <= 0.1


def test_an_unfinished_run_without_evidence_is_blamed_where_its_work_stopped() -> None:
    """The sidecar gave up waiting for the run's root span: the last acting step, not a
    guess by place; evidence, where a step carries some, still leads."""
    steps = (
        ("user", H, "Summarise the meeting."),
        ("Planner", M, "Plan: read the notes, then summarise."),
        ("Writer", M, "The meeting agreed on the budget."),
        ("notes", T, "ok"),
    )
    stopped = LearnedAttributor().attribute_now(
        run(*steps, metadata={"unfinished": True}), AttributeOptions()
    )
    assert (stopped.agent, stopped.step) == ("Writer", 2)
    assert "never finished" in stopped.reason and stopped.confidence is not None
    assert stopped.confidence <= 0.15
    assert stopped.details["guess"] is False and stopped.details["stopped_after"] == 2
    unfinished_census = CENSUS.model_copy(update={"metadata": {"unfinished": True}})
    evidence = LearnedAttributor().attribute_now(unfinished_census, AttributeOptions())
    assert (evidence.agent, evidence.step) == ("Researcher", 4)


def test_first_error_falls_back_to_figures_before_guessing() -> None:
    attribution = asyncio.run(FirstError().attribute(CENSUS, AttributeOptions()))
    assert attribution.step == 4 and attribution.details["rule"] == "contradicts-report"
    assert "census_lookup returned 522,250" in attribution.reason
    quiet = run(("user", H, "Hi"), ("Planner", M, "Hello."), ("Writer", M, "Done."))
    guess = asyncio.run(FirstError().attribute(quiet, AttributeOptions()))
    assert guess.reason.startswith("A guess:") and guess.confidence is not None
    assert guess.confidence <= 0.05


def test_a_simulated_user_in_the_roster_can_be_blamed_a_plain_user_cannot() -> None:
    steps = (
        ("user", H, "Exchange my order #W1 for the red keyboard."),
        ("Assistant", M, "get_order(order_id='#W1')"),
        ("get_order", T, "order #W1: keyboard kb-1, 89 EUR"),
        ("user", H, "Actually, my order number is #W7 and it cost 145 EUR."),
        ("Assistant", M, "Exchanged #W7."),
    )
    plain = LearnedAttributor().attribute_now(run(*steps), AttributeOptions())
    assert plain.agent == "Assistant"
    simulated = run(*steps, metadata={"roster": ["Assistant", "user"]})
    with_user = LearnedAttributor().attribute_now(simulated, AttributeOptions())
    assert "user" in with_user.details["agent_mass"]


def test_a_figure_contradicting_the_previous_agent_names_that_agent() -> None:
    relay = run(
        ("user", H, "How many people live in Oslo?"),
        ("Researcher", M, 'census_lookup({"city": "Oslo"})'),
        ("census_lookup", T, "Oslo: 522,250 residents"),
        ("Researcher", M, "The census says Oslo has 522,250 residents."),
        ("Writer", M, "Oslo has 225,520 residents."),
        final="Oslo has 225,520 residents.",
    )
    evidence = step_evidence(relay, run_features(relay))
    assert evidence[4][0].text == "Writer stated 225,520 right after Researcher said 522,250"
    assert not evidence[3]
    attribution = asyncio.run(FirstError().attribute(relay, AttributeOptions()))
    assert (attribution.step, attribution.agent) == (4, "Writer")
    assert attribution.reason.endswith("Writer stated 225,520 right after Researcher said 522,250.")


def _looping(retry_after_error: bool = False) -> Trajectory:
    """A Researcher that calls a tool, is answered, and calls it again the same way."""
    answer = "error: upstream timeout" if retry_after_error else "lantern, Mar: units 195"
    call = 'sales_total({"product": "lantern", "month": "Mar"})'
    arguments = '{"month": "Mar", "product": "lantern"}'  # the same, keys in another order
    steps = [
        Step(index=0, agent="user", kind=H, content="How many lanterns sold in March?"),
        Step(index=1, agent="Researcher", kind=StepKind.LLM, content=call),
        Step(index=2, agent="Researcher", kind=T, content=answer, tool_name="sales_total",
             tool_arguments=arguments, tool_result=answer),
        Step(index=3, agent="Researcher", kind=StepKind.LLM, content=call),
        Step(index=4, agent="Researcher", kind=T, content=answer, tool_name="sales_total",
             tool_arguments=arguments, tool_result=answer),
        Step(index=5, agent="Researcher", kind=StepKind.LLM, content=call),
    ]  # fmt: skip
    return Trajectory(run_id="r", task="How many lanterns sold in March?", steps=tuple(steps))


def test_the_first_repeat_of_an_answered_call_is_evidence_and_names_the_call() -> None:
    looping = _looping()
    evidence = step_evidence(looping, run_features(looping))
    repeats = [(e.step, e.kind) for items in evidence for e in items if e.kind == "repeated-call"]
    assert repeats == [(3, "repeated-call")]  # the loop's start, not every turn of it
    text = evidence[3][0].text
    assert text.startswith("Researcher called sales_total again with the same arguments")
    assert "units 195" in text
    attribution = LearnedAttributor().attribute_now(looping, AttributeOptions())
    assert (attribution.agent, attribution.step) == ("Researcher", 3)
    assert "again with the same arguments" in attribution.reason


def test_calling_again_after_an_error_is_a_retry_not_a_repeat() -> None:
    retrying = _looping(retry_after_error=True)
    evidence = step_evidence(retrying, run_features(retrying))
    assert not any(e.kind == "repeated-call" for items in evidence for e in items)


WITHHELD = "I looked into it and passed it on."


def _relay(handover: str = WITHHELD, named_tool: bool = True) -> Trajectory:
    """A Researcher looks a figure up and hands over to the Analyst, with or without it."""
    report = "Oslo: 522,250 residents (census)"
    steps = [
        Step(index=0, agent="user", kind=H, content="How many people live in Oslo?"),
        Step(index=1, agent="Researcher", kind=M, content="census_lookup(city='Oslo')"),
        Step(index=2, agent="census_lookup" if named_tool else "terminal", kind=T,
             content=report, tool_name="census_lookup" if named_tool else None),
        Step(index=3, agent="Researcher", kind=M, content=handover),
        Step(index=4, agent="Analyst", kind=M, content="I don't have the population of Oslo."),
    ]  # fmt: skip
    return Trajectory(
        run_id="r",
        task="How many people live in Oslo?",
        final_answer="I don't have the population of Oslo.",
        steps=tuple(steps),
    )


def test_a_turn_that_passes_on_none_of_its_tools_figures_is_named() -> None:
    relay = _relay()
    features = run_features(relay)
    evidence = step_evidence(relay, features)
    withheld = [
        (e.step, e.text) for items in evidence for e in items if e.kind == "withheld-figures"
    ]
    assert withheld == [
        (3, "Researcher passed its turn on without any of the figures census_lookup returned"
            " (522,250)")
    ]  # fmt: skip
    # Passing the figure on, or calling a tool next, is not withholding.
    passed_on = _relay("Oslo has 522,250 residents.")
    assert not any(facts.withheld for facts in run_features(passed_on).scanner.values)
    calling = _relay("census_lookup(city='Bergen')")
    assert not any(facts.withheld for facts in run_features(calling).scanner.values)
    # A shared terminal's output in a group chat (no tool named) is not one agent's report.
    terminal = _relay(named_tool=False)
    assert not any(facts.withheld for facts in run_features(terminal).scanner.values)
    # The Analyst, who never got the figure, is not where the failure started.
    attribution = LearnedAttributor().attribute_now(relay, AttributeOptions())
    assert (attribution.agent, attribution.step) == ("Researcher", 3)
    assert "without any of the figures census_lookup returned" in attribution.reason


def _stop(*after: tuple[str, StepKind, str], named_tools: bool = True) -> Trajectory:
    """A Researcher answers at once, looking nothing up; the Analyst takes it from there
    (tool reports under their tool's name, or a shared terminal's)."""
    stop = run(
        ("user", H, "How many people live in Oslo?"),
        ("Researcher", M, "I know this one: the answer is Oslo."),
        *after,
        final="1000",
    )
    steps = tuple(
        step.model_copy(update={"tool_name": step.agent})
        if step.kind is T and named_tools
        else step
        for step in stop.steps
    )
    return stop.model_copy(update={"steps": steps})


def test_a_turn_that_hands_on_before_anything_was_looked_up_is_named() -> None:
    stop = _stop(("Analyst", M, "calculate(expression='250 * 4')"), ("calculate", T, "1000"),
                 ("Analyst", M, "About 1000 people live in Oslo."))  # fmt: skip
    evidence = step_evidence(stop, run_features(stop))
    handed = [
        (e.step, e.text) for items in evidence for e in items if e.kind == "handed-on-nothing"
    ]
    assert handed == [
        (1, "Researcher handed the run on to Analyst before anything was looked up: it called"
            " no tool, gave no figure of its own and did not act again")
    ]  # fmt: skip
    # What the Analyst made up followed from being given nothing: the stop leads.
    attribution = LearnedAttributor().attribute_now(stop, AttributeOptions())
    assert (attribution.agent, attribution.step) == ("Researcher", 1)
    assert "before anything was looked up" in attribution.reason
    # A turn after a tool answered, a turn that calls a tool, and an agent that acts
    # again (a planner, say) are no such evidence.
    looked_up = run(
        ("user", H, "How many people live in Oslo?"),
        ("Researcher", M, "census_lookup(city='Oslo')"),
        ("census_lookup", T, "Oslo: 522,250 residents (census)"),
        ("Researcher", M, "I looked it up."),
        ("Analyst", M, "About 1000 people live in Oslo."),
        final="1000",
    )
    planner = _stop(("Analyst", M, "About 1000 people live in Oslo."),
                    ("Researcher", M, "Thank you, Analyst."))  # fmt: skip
    # In a group chat with a shared terminal, the opening message sets the group's task.
    group_chat = _stop(("Analyst", M, "calculate(expression='250 * 4')"),
                       ("terminal", T, "1000"),
                       ("Analyst", M, "About 1000 people live in Oslo."),
                       named_tools=False)  # fmt: skip
    for other in (looked_up, planner, group_chat, CENSUS):
        found = step_evidence(other, run_features(other))
        assert not any(e.kind == "handed-on-nothing" for items in found for e in items)


def test_a_stop_does_not_take_the_blame_for_what_a_tool_gave_the_next_agent() -> None:
    """Once a tool has answered the next agent, its own mistakes are its own."""
    stop = _stop(("Analyst", M, "census_lookup(city='Oslo')"),
                 ("census_lookup", T, "Oslo: 522,250 residents (census)"),
                 ("Analyst", M, "Oslo has 225,520 residents."))  # fmt: skip
    attribution = LearnedAttributor().attribute_now(stop, AttributeOptions())
    assert (attribution.agent, attribution.step) == ("Analyst", 4)


def test_an_iso_date_argument_is_supported_by_the_date_as_the_user_wrote_it() -> None:
    facts = Provenance("Book me a flight.")
    facts.push(Step(index=0, agent="user", kind=H, content="I fly on May 26th, from JFK."), False)
    call = Step(index=1, agent="Agent", kind=M, content="", tool_name="search",
                tool_arguments='{"origin": "JFK", "date": "2024-05-26"}')  # fmt: skip
    assert facts.push(call, True).unsupported_arguments == ()
    other_day = Step(index=2, agent="Agent", kind=M, content="", tool_name="search",
                     tool_arguments='{"origin": "JFK", "date": "2024-05-02"}')  # fmt: skip
    assert facts.push(other_day, True).unsupported_arguments == (("search", "date", "2024-05-02"),)
