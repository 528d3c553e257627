"""Arithmetic an agent writes out is checked against its own operands: a result its
operands do not give is decisive evidence, said in words; correct arithmetic, dates,
times, identifiers, ranges and figures relayed from elsewhere are not."""

from __future__ import annotations

import pytest

from faultfinder.attributors.arithmetic import ArithmeticChecks, wrong_arithmetic
from faultfinder.attributors.base import AttributeOptions
from faultfinder.attributors.heuristics import is_acting_step
from faultfinder.attributors.learned import LearnedAttributor
from faultfinder.attributors.learned.evidence import DECISIVE, DECISIVE_STRENGTH, step_evidence
from faultfinder.attributors.learned.features import run_features
from faultfinder.attributors.model import Trajectory
from tests.unit.test_evidence_across_frameworks import (
    HO,
    H,
    L,
    M,
    T,
    evidence_of,
    run,
    scoring,
    step,
)

OPTIONS = AttributeOptions()


def said(text: str, agent: str = "Planner") -> list[str]:
    return [found.said_by(agent) for found in wrong_arithmetic(text)]


def wrong_steps(trajectory: Trajectory) -> dict[int, list[str]]:
    """The steps carrying wrong-arithmetic evidence, with its sentences."""
    return evidence_of(trajectory, "wrong-arithmetic")


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        ("3 nights × EUR 142 = EUR 416", "Planner wrote 3 × 142 = 416; 3 × 142 is 426"),
        ("12 + 7 + 30 = 59", "Planner wrote 12 + 7 + 30 = 59; 12 + 7 + 30 is 49"),
        ("Total: 1,250 - 300 = 850", "Planner wrote 1,250 - 300 = 850; 1,250 - 300 is 950"),
        ("15% of 240 is 30", "Planner wrote 15% of 240 = 30; 15% of 240 is 36"),
        ("(4 × 25) + 10 = 120", "Planner wrote (4 × 25) + 10 = 120; (4 × 25) + 10 is 110"),
        ("2.5 * 4 equals 11", "Planner wrote 2.5 × 4 = 11; 2.5 × 4 is 10"),
        ("So 3 x €142 comes to €416.", "Planner wrote 3 × 142 = 416; 3 × 142 is 426"),
        ("2 rooms x 3 nights x $100 gives $500",
         "Planner wrote 2 × 3 × 100 = 500; 2 × 3 × 100 is 600"),
        ("**Subtotal:** 3 × 49.90 = 139.70",
         "Planner wrote 3 × 49.90 = 139.70; 3 × 49.90 is 149.7"),
        ("- 10,000 × 1.05 = 11,500",
         "Planner wrote 10,000 × 1.05 = 11,500; 10,000 × 1.05 is 10,500"),
        ("30 / 240 = 15%", "Planner wrote 30 / 240 = 15%; 30 / 240 is 12.5%"),
    ],
)  # fmt: skip
def test_a_result_its_operands_do_not_give_is_found_and_said_in_words(
    text: str, sentence: str
) -> None:
    assert said(text) == [sentence]


@pytest.mark.parametrize(
    "text",
    [
        # Right, or right at the precision written.
        "3 × 142 = 426", "1/3 = 0.33", "2 × 19.99 = 39.98", "10 / 3 = 3.33", "2/3 = 0.67",
        "2 × 19.99 = 40", "100 + 50 × 2 = 300", "20% of 500 is 100", "4.5/5 = 90%",
        "3 × 142 = 426 + 50 = 476", "1,234,567 × 3 = 3,703,700",
        # Dates, times, identifiers, ranges, phone numbers, versions, list markers.
        "The deploy on 2026-11-03 is 3 days away", "From 02:10 + 5 = 7 minutes later",
        "The trip is 10-12 days", "Expect 3–5 nights = 3 options", "Call 555-0100 = 3 rings",
        "Flight AF-1024 x 2 = 2 seats", "Flight AF 77 x 2 tickets = EUR 300",
        "Room 12 + 7 is 19", "Upgrade v1.2.3 - 1 = 0", "1. 3 + 4 = 7",
        # Letters, signs, scales, mixed units, code, approximations.
        "2x + 3 = 7", "the max 3 x 4 = 12", "-5 + 3 = -2", "2,5 × 4 = 10", "1.5k + 500 = 2000",
        "90 min + 30 min = 2 hours", "x = 3 * 142", "2 ** 10 = 1024", "```\n3 * 142 = 416\n```",
        "3 × 142 ≈ 430", "3 × 142 is about 430", "Temperatures of 20 - 25 is 5 degrees apart",
        # A calculation the text itself corrects.
        "3 × 142 = 416 is wrong; 3 × 142 is 426",
    ],
)  # fmt: skip
def test_right_arithmetic_and_what_only_looks_like_it_are_not_evidence(text: str) -> None:
    assert said(text) == []


def test_only_the_first_writer_of_a_calculation_answers_for_it() -> None:
    checks = ArithmeticChecks("Check the quote: it says 3 × 142 = 416.")
    quoted = step(1, "Planner", M, "The quote says 3 × 142 = 416; I'll forward it.")
    made = step(2, "Planner", M, "Adding the fee: 426 + 25 = 461.")
    repeated = step(3, "Reviewer", M, "Planner's sum 426 + 25 = 461 goes to the customer.")
    found = [checks.push(s, acting=is_acting_step(s)) for s in (quoted, made, repeated)]
    assert [f.said_by("Planner") if f else None for f in found] == [
        None,
        "Planner wrote 426 + 25 = 461; 426 + 25 is 451",
        None,
    ]


# --- runs shaped as frameworks record them -------------------------------------------

TASK = "Price a stay of 12 nights at Hotel Lux in Porto for the team offsite."


def langgraph_stay(calculation: str) -> Trajectory:
    """A LangGraph supervisor whose pricing worker looks the rate up and writes the total
    out; the supervisor relays it. The model in the end-to-end test prefers the
    supervisor's long plan."""
    plan = (
        "Plan: ask the pricing worker for the nightly rate, check the deposit rules, compare"
        " the stay with the budget, and report the total for the whole stay to the team. "
    )
    return run(
        TASK,
        step(0, "user", H, TASK),
        step(1, "supervisor", M, plan * 2),
        step(2, "pricing_worker", L, "", tool_name="hotel_rates",
             tool_arguments='{"hotel": "Hotel Lux", "city": "Porto"}'),
        step(3, "hotel_rates", T, "Hotel Lux: rate 142 EUR per night; group deposit 1,740 EUR",
             tool_name="hotel_rates"),
        step(4, "pricing_worker", M, calculation),
        step(5, "supervisor", M, "Thanks, I'll pass the total on to the team."),
    )  # fmt: skip


def test_a_workers_wrong_total_is_decisive_evidence_of_its_own_step() -> None:
    stay = langgraph_stay("12 nights × EUR 142 = EUR 1,740 for the stay.")
    assert wrong_steps(stay) == {4: ["pricing_worker wrote 12 × 142 = 1,740; 12 × 142 is 1,704"]}
    evidence = step_evidence(stay, run_features(stay))
    (item,) = [e for e in evidence[4] if e.kind == "wrong-arithmetic"]
    assert item.strength == DECISIVE_STRENGTH and item.kind in DECISIVE
    assert wrong_steps(langgraph_stay("12 nights × EUR 142 = EUR 1,704 for the stay.")) == {}


def test_the_lead_moves_to_the_wrong_calculation_where_nothing_else_points() -> None:
    """The model prefers the supervisor's long plan; with the total written out right the
    answer stays a guess there, with it written out wrong the calculation leads."""
    attributor = LearnedAttributor(scoring("log_length"))
    right = attributor.attribute_now(langgraph_stay("12 nights × EUR 142 = EUR 1,704."), OPTIONS)
    assert (right.step, right.basis) == (1, "guess")
    wrong = attributor.attribute_now(langgraph_stay("12 nights × EUR 142 = EUR 1,740."), OPTIONS)
    assert (wrong.step, wrong.agent, wrong.basis) == (4, "pricing_worker", "wrong-arithmetic")
    assert wrong.details["overruled_step"] == 1
    assert "12 × 142 is 1,704" in wrong.reason
    assert wrong.mode == "R.3"


def test_a_wrong_calculation_in_a_calls_arguments_is_the_callers() -> None:
    # OpenAI Agents SDK: triage hands off to billing, which refunds with a memo whose
    # arithmetic is wrong; the handoff's own arithmetic is right.
    task = "Refund the two mugs (19.99 each) on order W123."
    handoff = run(
        task,
        step(0, "user", H, task),
        step(1, "triage_agent", HO, "", tool_name="transfer_to_billing_agent",
             tool_arguments='{"note": "2 x 19.99 = 39.98 to refund"}'),
        step(2, "billing_agent", L, "", tool_name="refund",
             tool_arguments='{"order": "W123", "amount": "38.98", "memo": "2 x 19.99 = 38.98"}'),
        step(3, "refund", T, "refunded 38.98", tool_name="refund"),
    )  # fmt: skip
    assert wrong_steps(handoff) == {
        2: ["billing_agent wrote 2 × 19.99 = 38.98; 2 × 19.99 is 39.98"]
    }


def test_a_tools_wrong_sum_is_not_the_agents_that_relays_it() -> None:
    # CrewAI: the analyst's calculator tool answers with a wrong sum, the analyst passes
    # it on word for word; the writer then computes right.
    task = "Sum the open tickets per team."
    crew = run(
        task,
        step(0, "user", H, task),
        step(1, "Analyst", L, "", tool_name="calculator", tool_arguments='{"expr": "12+7+30"}'),
        step(2, "calculator", T, "12 + 7 + 30 = 59", tool_name="calculator"),
        step(3, "Analyst", M, "The calculator says 12 + 7 + 30 = 59."),
        step(4, "Writer", M, "Per team: 12 + 7 + 30 = 49 open tickets."),
    )  # fmt: skip
    assert wrong_steps(crew) == {}


def test_dates_times_ids_and_ranges_in_an_agents_answer_are_not_arithmetic() -> None:
    # pydantic-ai: a single agent answers with a date, a time, an order id, a range and a
    # phone number next to "=" and "is".
    task = "When does order AF-1024 arrive?"
    single = run(
        task,
        step(0, "user", H, task),
        step(1, "agent", L, "", tool_name="track", tool_arguments='{"order": "AF-1024"}'),
        step(2, "track", T, '{"ships": "2026-11-03T02:10Z", "days": "10-12"}', tool_name="track"),
        step(3, "agent", M, "Order AF-1024 ships 2026-11-03 at 02:10 UTC; delivery is 10-12"
             " days. Questions? Call 555-0100 = the depot. Version 1.2.3 - 1 is current."),
    )  # fmt: skip
    assert wrong_steps(single) == {}
