"""What the task forbids in so many words, and the first step that does it anyway: read
from the task's own prohibitions, found in an agent's call or decision, never in a step
that declines, quotes, asks about or merely checks the forbidden thing, nor in a tool's
answer."""

from __future__ import annotations

import pytest

from faultfinder.attributors.base import AttributeOptions
from faultfinder.attributors.constraints import broken_by, task_constraints
from faultfinder.attributors.learned import LearnedAttributor
from faultfinder.attributors.learned.evidence import STRONG, step_evidence, tier
from faultfinder.attributors.learned.features import run_features
from faultfinder.attributors.model import Step, Trajectory
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
INCIDENT = "Restore the orders database; no failover to replica-2."
TRIP = "Book a flight from Paris to Lisbon on Friday. No red-eye flights."


def breaches(trajectory: Trajectory) -> dict[int, list[str]]:
    """The steps carrying breaks-task-constraint evidence, with its sentences."""
    return evidence_of(trajectory, "breaks-task-constraint")


def breaks(task: str, s: Step) -> bool:
    return any(broken_by(s, constraint) is not None for constraint in task_constraints(task))


@pytest.mark.parametrize(
    ("task", "prohibitions"),
    [
        (INCIDENT, ["no failover to replica-2"]),
        (TRIP, ["No red-eye flights"]),
        ("Fly to Lisbon. No red-eye flights, no layovers in Frankfurt.",
         ["No red-eye flights", "no layovers in Frankfurt"]),
        ("Fix the outage without restarting the payments database.",
         ["without restarting the payments database"]),
        ("Avoid AF flights. Never email the customer directly.",
         ["Avoid AF flights", "Never email the customer directly"]),
        ("Failover to replica-2 is not allowed.", ["Failover to replica-2 is not allowed"]),
        ("Replica-2 must not be used.", ["Replica-2 must not be used"]),
        ("Any hotel in Porto except the Ibis.", ["except the Ibis"]),
        ("Use the primary database, not replica-2.", ["not replica-2"]),
        ("Please don't book the red-eye flight AF 77 or anything overnight.",
         ["don't book the red-eye flight AF 77"]),
    ],
)  # fmt: skip
def test_the_tasks_prohibitions_are_read_in_its_own_words(
    task: str, prohibitions: list[str]
) -> None:
    assert [c.said for c in task_constraints(task)] == prohibitions


@pytest.mark.parametrize(
    "task",
    [
        "I don't know the order number.",  # not an instruction
        "There is no failover configured. The app has no dark mode.",  # a description
        "If the primary is down, do not fail over to replica-2.",  # a condition
        "Do not fail over to replica-2 until the backup finishes.",
        "Do not proceed without approval.",  # a double negative: an obligation
        "All rooms except 12 are booked.",
        "Users have been without internet since 9.",
        "Don't hesitate to ask questions. No more than 3 nights.",
        "Do not refund.",  # a bare verb: nothing specific to look for
    ],
)
def test_descriptions_conditions_and_idioms_forbid_nothing(task: str) -> None:
    assert task_constraints(task) == []


@pytest.mark.parametrize(
    ("task", "content", "fields", "broken"),
    [
        (INCIDENT, "Primary is down. I'll fail over to replica-2 now.", {}, True),
        (INCIDENT, "ops_worker: fail over to replica-2 now.", {}, True),
        (INCIDENT, "We are failing-over to replica-2 to restore service.", {}, True),
        (INCIDENT, "", {"tool_name": "failover",
                        "tool_arguments": '{"target": "replica-2"}'}, True),
        (INCIDENT, 'db_admin({"action": "fail-over", "to": "Replica 2"})', {}, True),
        (TRIP, "Booking the red-eye flight AF 77.", {}, True),
        (TRIP, "", {"tool_name": "book_flight",
                    "tool_arguments": '{"flight": "AF 77", "fare": "red-eye"}'}, True),
        ("Fix it without restarting the payments database.",
         "Let's restart the payments database.", {}, True),
        ("Any hotel in Porto except the Ibis.", "I'll reserve the Ibis Porto Centro.", {}, True),
        ("Replica-2 must not be used.", "I'll use the replica-2 database.", {}, True),
        ("Report the share without rounding.", "Rounding to two decimals: 0.14.", {}, True),
        # Declining, quoting, asking, hedging, checking: not doing it.
        (INCIDENT, "We will not fail over to replica-2.", {}, False),
        (INCIDENT, "Avoiding replica-2 as asked; restoring the primary instead.", {}, False),
        (INCIDENT, "The task says: no failover to replica-2.", {}, False),
        (INCIDENT, 'The runbook says "fail over to replica-2"; I restore the primary.', {}, False),
        (INCIDENT, "Should we fail over to replica-2?", {}, False),
        (INCIDENT, "If the primary stays down we could fail over to replica-2.", {}, False),
        (INCIDENT, "I'll check replica-2's replication lag.", {}, False),
        (INCIDENT, "Replica-2 failover status is unknown.", {}, False),
        (INCIDENT, "", {"tool_name": "check_status",
                        "tool_arguments": '{"host": "replica-2", "mode": "failover"}'}, False),
        (TRIP, "AF 77 is a red-eye flight, so I'm booking TP 433 instead.", {}, False),
        (TRIP, "I'll book TP 433 because the red-eye flight AF 77 leaves at 23:55.", {}, False),
        (TRIP, "Selected TP 433 over the red-eye flight AF 77.", {}, False),
        (TRIP, "", {"tool_name": "search_flights",
                    "tool_arguments": '{"query": "red-eye flights Paris Lisbon"}'}, False),
        (TRIP, "", {"tool_name": "web_search",
                    "tool_arguments": '{"query": "red-eye flight AF 77 reviews"}'}, False),
        (TRIP, "", {"tool_name": "book_flight",
                    "tool_arguments": '{"flight": "TP 433", "red_eye_flight": false}'}, False),
        (TRIP, "", {"tool_name": "book_flight",
                    "tool_arguments": '{"flight": "TP 433", "exclude": "red-eye flights"}'}, False),
    ],
)  # fmt: skip
def test_a_step_breaks_a_prohibition_only_by_doing_it(
    task: str, content: str, fields: dict[str, str], broken: bool
) -> None:
    assert breaks(task, step(0, "agent", L, content, **fields)) is broken


# --- runs shaped as frameworks record them -------------------------------------------


def test_only_the_first_step_breaking_a_prohibition_is_evidence() -> None:
    # LangGraph: the supervisor orders the failover, the worker carries it out; the
    # worker's call is the order followed, the order is the breach.
    incident = run(
        INCIDENT,
        step(0, "user", H, INCIDENT),
        step(1, "supervisor", M, "Task for ops_worker: no failover to replica-2; restore it."),
        step(2, "ops_worker", L, "", tool_name="db_status", tool_arguments='{"db": "orders"}'),
        step(3, "db_status", T, "primary: down; replica-2: healthy, failover possible",
             tool_name="db_status"),
        step(4, "supervisor", M, "ops_worker: fail over to replica-2 now."),
        step(5, "ops_worker", L, "", tool_name="failover",
             tool_arguments='{"target": "replica-2"}'),
        step(6, "failover", T, "failover to replica-2 complete", tool_name="failover"),
    )  # fmt: skip
    assert breaches(incident) == {
        4: [
            "supervisor decided to fail over to replica-2 now although the task says"
            " “no failover to replica-2”"
        ]
    }


def trip(decision: str) -> Trajectory:
    """An OpenAI Agents SDK run: triage plans at length and hands off; the booking agent
    searches, reads the fares and says what it books. The model in the end-to-end test
    prefers triage's long plan."""
    plan = (
        "Planning: find the Friday flights from Paris to Lisbon, compare fares and departure"
        " times, then hand the booking over with the chosen flight. "
    )
    booked = '{"flight": "AF 77"}' if "AF 77" in decision else '{"flight": "TP 433"}'
    return run(
        TRIP,
        step(0, "user", H, TRIP),
        step(1, "triage_agent", HO, plan * 2, tool_name="transfer_to_booking_agent",
             tool_arguments="{}"),
        step(2, "booking_agent", L, "", tool_name="search_flights",
             tool_arguments='{"from": "Paris", "to": "Lisbon", "day": "Friday"}'),
        step(3, "search_flights", T, "AF 77: departs 23:55, red-eye flight, 89 EUR\n"
             "TP 433: departs 07:05, 140 EUR", tool_name="search_flights"),
        step(4, "booking_agent", M, decision),
        step(5, "booking_agent", L, "", tool_name="book_flight", tool_arguments=booked),
        step(6, "book_flight", T, "confirmed", tool_name="book_flight"),
    )  # fmt: skip


def test_the_lead_moves_to_the_breaking_step_where_nothing_else_points() -> None:
    attributor = LearnedAttributor(scoring("log_length"))
    kept = attributor.attribute_now(trip("Booking TP 433, the morning flight."), OPTIONS)
    assert (kept.step, kept.basis) == (1, "guess")
    broken = attributor.attribute_now(trip("Booking the red-eye flight AF 77."), OPTIONS)
    assert (broken.step, broken.agent, broken.basis) == (
        4,
        "booking_agent",
        "breaks-task-constraint",
    )
    assert broken.details["overruled_step"] == 1
    assert "although the task says “No red-eye flights”" in broken.reason
    assert broken.mode == "V.1"


def test_a_breach_is_strong_evidence_not_decisive() -> None:
    booked = trip("Booking the red-eye flight AF 77.")
    evidence = step_evidence(booked, run_features(booked))
    (item,) = evidence[4]
    assert item.kind == "breaks-task-constraint" and STRONG <= item.strength < 0.9
    assert tier(evidence[4]) == 2


def test_a_crew_that_searches_reads_and_declines_breaks_nothing() -> None:
    # CrewAI: the researcher's search names the forbidden thing, the tool's answer holds
    # it, the booking agent declines it.
    crew = run(
        TRIP,
        step(0, "user", H, TRIP),
        step(1, "Researcher", L, "", tool_name="search_flights",
             tool_arguments='{"query": "red-eye flights Paris Lisbon Friday"}'),
        step(2, "search_flights", T, "Booking the red-eye flight AF 77 saves 51 EUR.",
             tool_name="search_flights"),
        step(3, "Researcher", M, "Found TP 433 and AF 77; AF 77 is a red-eye flight."),
        step(4, "Booking Agent", M, "AF 77 is a red-eye flight, so I'm booking TP 433 instead."),
        step(5, "Booking Agent", L, "", tool_name="book_flight",
             tool_arguments='{"flight": "TP 433", "red_eye": false}'),
    )  # fmt: skip
    assert breaches(crew) == {}


def test_a_single_agent_that_quotes_the_constraint_then_breaks_it() -> None:
    # pydantic-ai: one agent restates the constraint, then does what it forbids.
    task = "Fix the checkout outage without restarting the payments database."
    single = run(
        task,
        step(0, "user", H, task),
        step(1, "agent", M, "Constraint: without restarting the payments database."),
        step(2, "agent", L, "", tool_name="read_logs", tool_arguments='{"service": "payments"}'),
        step(3, "read_logs", T, "connection pool exhausted", tool_name="read_logs"),
        step(4, "agent", M, "Restarting the payments database now."),
    )  # fmt: skip
    assert breaches(single) == {
        4: [
            "agent wrote “Restarting the payments database now.” although the task says"
            " “without restarting the payments database”"
        ]
    }
