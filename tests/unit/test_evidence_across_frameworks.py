"""Evidence on runs shaped as other frameworks record them: a value an agent passes down,
a value written another way, an error the agent retried past, error words inside data, a
figure next to a date, a crash the run ended on; and an answer that says whether it rests
on evidence or is a guess."""

from __future__ import annotations

import asyncio

from faultfinder.attributors.base import AttributeOptions
from faultfinder.attributors.heuristics import FirstError, error_signals, shown_errors
from faultfinder.attributors.learned import LearnedAttributor, LinearScorer, StepModel
from faultfinder.attributors.learned.evidence import STRONG, step_evidence
from faultfinder.attributors.learned.features import feature_names, run_features
from faultfinder.attributors.learned.step_model import AgentRule
from faultfinder.attributors.model import Attribution, Step, StepKind, StepStatus, Trajectory
from faultfinder.attributors.provenance import Provenance, figures_in

M, L, T, H, HO = StepKind.MESSAGE, StepKind.LLM, StepKind.TOOL, StepKind.HUMAN, StepKind.HANDOFF
OPTIONS = AttributeOptions()


def step(i: int, agent: str, kind: StepKind, content: str = "", **fields: object) -> Step:
    return Step(index=i, agent=agent, kind=kind, content=content, **fields)  # type: ignore[arg-type]


def run(task: str, *steps: Step, final: str | None = None) -> Trajectory:
    return Trajectory(run_id="r", task=task, steps=steps, final_answer=final)


def unsupported_arguments(trajectory: Trajectory) -> list[tuple[int, tuple[str, str, str]]]:
    provenance = Provenance(trajectory.task)
    found: list[tuple[int, tuple[str, str, str]]] = []
    for s in trajectory.steps:
        facts = provenance.push(s, s.kind in (M, L, HO))
        found.extend((s.index, argument) for argument in facts.unsupported_arguments)
    return found


def evidence_of(trajectory: Trajectory, kind: str) -> dict[int, list[str]]:
    """The steps carrying evidence of `kind`, with its sentences."""
    evidence = step_evidence(trajectory, run_features(trajectory))
    found = {i: [e.text for e in items if e.kind == kind] for i, items in enumerate(evidence)}
    return {i: texts for i, texts in found.items() if texts}


def kinds(trajectory: Trajectory) -> list[str]:
    """Every evidence kind of the run, step by step."""
    evidence = step_evidence(trajectory, run_features(trajectory))
    return [e.kind for items in evidence for e in items]


def scoring(feature: str, weight: float = 1.0) -> StepModel:
    """A model that ranks steps by one feature alone (a stand-in for a trained scorer's
    habits)."""
    names = feature_names()
    return StepModel(
        features=names,
        scorer=LinearScorer(
            mean=(0.0,) * len(names),
            scale=(1.0,) * len(names),
            weights=tuple(weight if name == feature else 0.0 for name in names),
        ),
        agent_rule=AgentRule.TOP_STEP,
    )


# --- 1. argument provenance: values passed down, values written another way -----------

INCIDENT = "Pull the checkout logs since 02:10 UTC on 2026-11-03 and count the failed orders."

# A LangGraph supervisor hands the window to its log worker in its own words.
SUPERVISOR = run(
    INCIDENT,
    step(0, "user", H, INCIDENT),
    step(1, "supervisor", M,
         "log_worker: fetch checkout logs from stg-eu-2 since 2026-11-03T02:10Z."),
    step(2, "log_worker", L, "", tool_name="fetch_logs",
         tool_arguments='{"cluster": "stg-eu-2", "since": "2026-11-03T02:10Z"}'),
    step(3, "fetch_logs", T, "02:11 order 18 ok\n02:12 order 19 ok", tool_name="fetch_logs"),
)  # fmt: skip


def test_a_value_the_supervisor_passes_down_supports_the_workers_call() -> None:
    assert unsupported_arguments(SUPERVISOR) == []
    assert "unsupported-argument" not in kinds(SUPERVISOR)
    # What nobody named, in any spelling, is still unsupported.
    other_day = SUPERVISOR.model_copy(update={"steps": (*SUPERVISOR.steps[:2], step(
        2, "log_worker", L, "", tool_name="fetch_logs",
        tool_arguments='{"cluster": "stg-eu-9", "since": "2026-11-04T02:10Z"}'))})  # fmt: skip
    assert [argument for _, argument in unsupported_arguments(other_day)] == [
        ("fetch_logs", "cluster", "stg-eu-9"),
        ("fetch_logs", "since", "2026-11-04T02:10Z"),
    ]


def test_a_date_time_and_amount_written_another_way_support_the_call() -> None:
    # An OpenAI Agents SDK handoff carries arguments the user wrote in words.
    task = "Refund invoice INV-2207: 1,200 dollars charged twice on Nov 3rd, 2026 at 3 pm."
    handoff = run(
        task,
        step(0, "user", H, task),
        step(1, "triage_agent", HO, "", tool_name="transfer_to_billing_agent",
             tool_arguments='{"invoice": "INV-2207", "amount": "1200 USD",'
                            ' "charged_at": "2026-11-03 15:00"}'),
        step(2, "billing_agent", L, "", tool_name="refund",
             tool_arguments='{"invoice": "INV-2207", "amount": "1200"}'),
    )  # fmt: skip
    assert unsupported_arguments(handoff) == []
    # A figure that is not the one written stays unsupported, whatever its spelling.
    wrong = handoff.model_copy(update={"steps": (*handoff.steps[:2], step(
        2, "billing_agent", L, "", tool_name="refund",
        tool_arguments='{"invoice": "INV-2207", "amount": "2100"}'))})  # fmt: skip
    assert unsupported_arguments(wrong) == [(2, ("refund", "amount", "2100"))]


def test_a_crew_task_description_supports_the_workers_booking() -> None:
    # A CrewAI manager writes the task for its worker; the worker books what it was told.
    task = "Plan the team dinner for Friday."
    crew = run(
        task,
        step(0, "user", H, task),
        step(1, "Event Manager", M, "Task: book a table for 6 at Luigi's, Friday 7:30 pm."),
        step(2, "Booking Agent", L, "", tool_name="book_table",
             tool_arguments='{"restaurant": "Luigi\'s", "time": "19:30"}'),
    )  # fmt: skip
    assert unsupported_arguments(crew) == []


# --- 2. an error the agent retried past -----------------------------------------------

# pydantic-ai: the tool asks for a retry, the agent calls again and gets its answer, then
# states a total nothing supports.
RETRIED = run(
    "What is the total of open invoices for ACME?",
    step(0, "user", H, "What is the total of open invoices for ACME?"),
    step(1, "agent", L, "", tool_name="open_invoices", tool_arguments='{"customer": "acme"}'),
    step(2, "open_invoices", T, "", tool_name="open_invoices", status=StepStatus.ERROR,
         error="ModelRetry: unknown customer 'acme', use the customer id"),
    step(3, "agent", L, "", tool_name="open_invoices", tool_arguments='{"customer": "C-ACME"}'),
    step(4, "open_invoices", T, "INV-1: 1,250.00\nINV-2: 730.00", tool_name="open_invoices"),
    step(5, "agent", M, "The open invoices for ACME total 2,480.00."),
    final="2,480.00",
)  # fmt: skip


def test_an_error_the_agent_retried_past_is_a_cue_not_strong_evidence() -> None:
    evidence = step_evidence(RETRIED, run_features(RETRIED))
    (retried,) = [e for e in evidence[1] if "open_invoices" in e.text]
    assert retried.kind == "recovered-error" and retried.strength < STRONG
    assert "later call succeeded (step 4)" in retried.text
    learned = LearnedAttributor(scoring("error_after")).attribute_now(RETRIED, OPTIONS)
    assert (learned.step, learned.basis) == (5, "contradicts-report"), learned.reason


def test_first_error_passes_over_an_error_the_run_recovered_from() -> None:
    first = asyncio.run(FirstError().attribute(RETRIED, OPTIONS))
    assert (first.step, first.basis) == (5, "contradicts-report"), first.reason
    # With nothing else to go on, the recovered error is named as such.
    quiet = RETRIED.model_copy(update={"steps": RETRIED.steps[:5]})
    only = asyncio.run(FirstError().attribute(quiet, OPTIONS))
    assert (only.step, only.basis) == (1, "recovered-error")
    assert "got past it" in only.reason


# --- 3. error words inside data -------------------------------------------------------


def test_error_words_inside_returned_data_are_not_an_error() -> None:
    logs = step(
        0,
        "fetch_logs",
        T,
        "02:11 checkout failed for order 18\n02:14 3 failed"
        " checkouts in the last minute\n02:15 retry ok",
        tool_name="fetch_logs",
    )
    page = step(
        0,
        "web_search",
        T,
        "1. Known issue: chart fails to render in Safari\n2. Error handling in Chart.js - docs",
        tool_name="web_search",
    )
    nested = step(0, "search", T, '{"results": [{"title": "Timeout", "error": "none"}]}',
                  tool_name="search")  # fmt: skip
    for data in (logs, page, nested):
        assert error_signals(data), data.content  # the words are there…
        assert shown_errors(data) == [], data.content  # …but no call failed


def test_an_error_shaped_result_is_an_error() -> None:
    for result in ("Error: rate limit exceeded", '{"error": "invoice INV-9 not found"}',
                   "HTTP/1.1 503 Service Unavailable\n<html>busy</html>",
                   "Traceback (most recent call last):\n  ...\nKeyError: 'rows'",
                   "Order W9 not found", "Upload failed: disk full"):  # fmt: skip
        report = step(0, "tool", T, result, tool_name="tool")
        assert shown_errors(report), result
    assert shown_errors(step(0, "tool", T, "ok", tool_name="tool", status=StepStatus.ERROR))


def test_first_error_is_not_led_by_a_word_in_the_logs() -> None:
    task = "How many checkouts failed after the deploy?"
    logs = run(
        task,
        step(0, "user", H, task),
        step(1, "analyst", L, "", tool_name="fetch_logs", tool_arguments='{"service": "checkout"}'),
        step(2, "fetch_logs", T, "02:11 checkout failed for order 18\n02:12 order 19 ok",
             tool_name="fetch_logs"),
        step(3, "reporter", M, "There were 14 failed checkouts."),
    )  # fmt: skip
    first = asyncio.run(FirstError().attribute(logs, OPTIONS))
    assert first.step == 3 and first.basis == "contradicts-report", first.reason


# --- 4. figures next to dates, times and identifiers -----------------------------------


def test_figures_keep_dates_times_and_ids_whole_and_drop_punctuation() -> None:
    text = "On Oct 10, 2026, at 14:05 ticket INC-104 listed 1,200 units (2026-10-14)."
    assert figures_in(text) == {1200.0: "1,200"}
    assert figures_in("Revenue in 2026, 3,450 units; in 2025, 1,210.") == {
        3450.0: "3,450",
        1210.0: "1,210",
    }


def test_a_date_in_an_agents_summary_is_not_an_unsupported_figure() -> None:
    task = "Count the failed checkouts since last night's deploy."
    summary = run(
        task,
        step(0, "user", H, task),
        step(1, "log_worker", L, "", tool_name="count_failed",
             tool_arguments='{"since": "deploy"}'),
        step(2, "count_failed", T, "window_start=1762135800 count=1200", tool_name="count_failed"),
        step(3, "log_worker", M, "Since Nov 3, 2026, at 02:10 UTC, 1,200 checkouts failed."),
    )  # fmt: skip
    assert not [kind for kind in kinds(summary) if "figure" in kind]


# --- 5. evidence leads; the model orders within it; no evidence is a guess --------------


def test_evidence_outranks_a_step_the_model_prefers_for_what_it_shows() -> None:
    # The model prefers long steps; the agent's long plan carries no evidence, its short
    # call an order id nobody named.
    task = "Cancel my order ORD-5521."
    chat = run(
        task,
        step(0, "user", H, task),
        step(1, "support_agent", M, "Plan: look the order up, check that it can be cancelled, "
             "confirm with the customer, then cancel it and report back. " * 3),
        step(2, "support_agent", L, "", tool_name="cancel_order",
             tool_arguments='{"order_id": "ORD-5512"}'),
        step(3, "cancel_order", T, "cancelled", tool_name="cancel_order"),
    )  # fmt: skip
    attribution = LearnedAttributor(scoring("log_length")).attribute_now(chat, OPTIONS)
    assert (attribution.step, attribution.basis) == (2, "unsupported-argument")
    assert attribution.details["overruled_step"] == 1
    assert "order_id='ORD-5512'" in attribution.reason


def test_a_run_without_evidence_gets_an_answer_marked_as_a_guess() -> None:
    task = "Summarise the meeting notes."
    quiet = run(task, step(0, "user", H, task), step(1, "planner", M, "Read the notes first."),
                step(2, "writer", M, "The meeting agreed on the budget."))  # fmt: skip
    attribution = LearnedAttributor(scoring("log_length")).attribute_now(quiet, OPTIONS)
    assert attribution.basis == "guess" and attribution.reason.startswith("A guess:")
    first = asyncio.run(FirstError().attribute(quiet, OPTIONS))
    assert first.basis == "guess" and first.reason.startswith("A guess:")


# --- 7. a crash the run ended on ------------------------------------------------------

# An OpenAI Agents SDK run: the first turn states a figure of its own, the agent then
# calls the billing API, the call raises and the run ends on it (the agent's span
# records the error too).
CRASH = run(
    "Refund invoice INV-2207.",
    step(0, "user", H, "Refund invoice INV-2207."),
    step(1, "billing_agent", M, "The invoice is 1,340 dollars; refunding it now."),
    step(2, "billing_agent", L, "", tool_name="refund", tool_arguments='{"invoice": "INV-2207"}'),
    step(3, "billing_agent", T, "", tool_name="refund", status=StepStatus.ERROR,
         error="ConnectionError: billing API unreachable"),
    step(4, "billing_agent", M, "", status=StepStatus.ERROR,
         error="ConnectionError: billing API unreachable"),
)  # fmt: skip


def test_the_call_a_run_crashed_on_is_blamed_over_an_earlier_turn() -> None:
    early = LearnedAttributor(scoring("is_first_acting")).attribute_now(CRASH, OPTIONS)
    assert (early.agent, early.step, early.basis) == ("billing_agent", 2, "tool-error")
    assert "the run ended on it" in early.reason
    first = asyncio.run(FirstError().attribute(CRASH, OPTIONS))
    assert first.step == 2 and first.basis == "tool-error"


def test_a_crash_is_decisive_only_when_nothing_recovered() -> None:
    answered = step(5, "refund", T, "refund queued", tool_name="refund")
    retried = CRASH.model_copy(update={"steps": (*CRASH.steps, answered)})
    evidence = step_evidence(retried, run_features(retried))
    assert [e.kind for e in evidence[2]] == ["recovered-error"]


# --- the basis of an answer, stored and served ------------------------------------------


def test_an_attribution_stored_before_the_basis_was_recorded_still_loads() -> None:
    stored = {"method": "learned", "agent": "a", "step": 0, "reason": "r"}
    assert Attribution.model_validate(stored).basis is None
    fresh = LearnedAttributor().attribute_now(CRASH, OPTIONS)
    assert Attribution.model_validate(fresh.model_dump(mode="json")).basis == fresh.basis


def test_a_run_still_streaming_in_has_not_ended_on_its_latest_error() -> None:
    prefix = CRASH.model_copy(update={"steps": CRASH.steps[:4]})
    features = run_features(prefix)
    (whole,) = step_evidence(prefix, features)[2]
    (streaming,) = step_evidence(prefix, features, complete=False)[2]
    assert "the run ended on it" in whole.text and whole.strength > streaming.strength
    assert "the run ended on it" not in streaming.text
