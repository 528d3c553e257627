"""A refusal ("order #W2378156 has already been modified and cannot be changed again") is
the symptom of an earlier call that changed the same order or booking: that call's step
carries the evidence and leads, the refusal only points back at it. Never when nothing
earlier changed that entity: a look-up, a call that failed, another order, a refusal
before any call, an agent saying what it did itself."""

from __future__ import annotations

import pytest

from faultfinder.attributors.base import AttributeOptions
from faultfinder.attributors.consequences import changes_state, refusal
from faultfinder.attributors.learned import LearnedAttributor
from faultfinder.attributors.learned.evidence import POINTS_ELSEWHERE, step_evidence, tier
from faultfinder.attributors.learned.features import run_features
from faultfinder.attributors.model import Step, StepKind, Trajectory
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
ORDER = "#W2378156"


def causes(trajectory: Trajectory) -> dict[int, list[str]]:
    """The steps carrying caused-later-refusal evidence, with its sentences."""
    return evidence_of(trajectory, "caused-later-refusal")


@pytest.mark.parametrize(
    ("tool", "verb"),
    [
        ("modify_pending_order_items", "modify"),
        ("cancel_pending_order", "cancel"),
        ("exchange_delivered_order_items", "exchange"),
        ("return_delivered_order_items", "return"),
        ("update_reservation_flights", "update"),
        ("book_reservation", "book"),
        ("cancelReservation", "cancel"),
        ("Update Order Tool", "update"),
        ("get_order_details", None),
        ("check_refund_status", None),
        ("transfer_to_human_agents", None),
        ("search_flights", None),
        ("calculate", None),
    ],
)
def test_a_tool_changes_state_by_its_verb_not_a_look_up_or_a_handoff(
    tool: str, verb: str | None
) -> None:
    assert changes_state(tool) == verb


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        (f"I'm sorry, but order {ORDER} has already been modified and cannot be changed again.",
         ["w2378156"]),
        ("Error: non-pending order cannot be modified", []),
        ("Reservation HATHAT is no longer eligible for changes.", ["hathat"]),
        ("Unfortunately ORD-1042 has already been shipped.", ["ord-1042"]),
        ("I can't modify reservation 8JX2WO again.", ["8jx2wo"]),
        ("Only pending orders can be cancelled, and order 1042's status is delivered.",
         ["1042"]),
        ("The order status is cancelled, so I cannot process an exchange.", []),
        ('{"error": "order #W2378156 status is delivered"}', ["w2378156"]),
    ],
)  # fmt: skip
def test_a_refusal_is_read_with_the_identifiers_it_names(text: str, ids: list[str]) -> None:
    found = refusal(text)
    assert found is not None and found[1] == ids


@pytest.mark.parametrize(
    "text",
    [
        f"I have already cancelled order {ORDER} for you.",  # what the agent did itself
        f"Your order {ORDER} has already been delivered.",  # a state, no refusal
        '{"order_id": "#W2378156", "status": "cancelled", "items": []}',  # a record
        '{"order_id": "#W2378156", "status": "cancelled", "error": null}',
        "Thanks, the lamp is no longer needed.",
        "Can I change the order again before it ships?",
    ],
)
def test_a_state_without_a_refusal_or_ones_own_doing_is_no_symptom(text: str) -> None:
    assert refusal(text) is None


# --- runs shaped as frameworks record them -------------------------------------------

DETAILS = (
    '{"order_id": "#W2378156", "status": "pending", "payment_method_id": "gift_card_7",'
    ' "items": [{"item_id": "1008292230", "name": "desk lamp"},'
    ' {"item_id": "4920090458", "name": "kettle"}], "options": {"1008292231": "lamp, black"}}'
)
TASK = f"Swap the lamp and the kettle in my order {ORDER}."


def sdk_support(answer: str) -> Trajectory:
    """An OpenAI Agents SDK run: triage plans at length and hands off; the support agent
    looks the order up, modifies one item, then tells the customer the other can no longer
    be changed (or, in `answer`, something else). The model in the end-to-end test prefers
    triage's long plan."""
    plan = (
        "Planning: look up the customer's order, check which items can still be swapped,"
        " confirm the new options and payment method, then hand over to support. "
    )
    modify = (
        '{"order_id": "#W2378156", "item_ids": ["1008292230"], "new_item_ids": ["1008292231"],'
        ' "payment_method_id": "gift_card_7"}'
    )
    return run(
        TASK,
        step(0, "user", H, TASK),
        step(1, "triage_agent", HO, plan * 2, tool_name="transfer_to_support_agent",
             tool_arguments="{}"),
        step(2, "support_agent", L, "", tool_name="get_order_details",
             tool_arguments='{"order_id": "#W2378156"}'),
        step(3, "get_order_details", T, DETAILS, tool_name="get_order_details"),
        step(4, "support_agent", L, "", tool_name="modify_pending_order_items",
             tool_arguments=modify),
        step(5, "modify_pending_order_items", T, '{"order_id": "#W2378156", "status": "pending"}',
             tool_name="modify_pending_order_items"),
        step(6, "user", H, "Great, and the kettle too please."),
        step(7, "support_agent", M, answer),
    )  # fmt: skip


REFUSED = f"I'm sorry, but order {ORDER} has already been modified and cannot be changed again."


def test_the_earlier_modification_carries_the_refusal_it_caused() -> None:
    support = sdk_support(REFUSED)
    assert causes(support) == {
        4: [
            "support_agent modified order #W2378156 at step 4 (modify_pending_order_items);"
            " at step 7 the order could no longer be changed: “I'm sorry, but order #W2378156"
            " has already been modified and cannot be changed again.”"
        ]
    }
    evidence = step_evidence(support, run_features(support))
    assert tier(evidence[4]) == 2
    (pointer,) = [e for e in evidence[7] if e.kind == "shows-consequence"]
    assert pointer.kind in POINTS_ELSEWHERE and "step 4" in pointer.text


def test_the_lead_moves_from_the_symptom_to_the_earlier_modifying_call() -> None:
    attributor = LearnedAttributor(scoring("log_length"))
    fine = attributor.attribute_now(sdk_support("Done: the kettle is swapped as well."), OPTIONS)
    assert (fine.step, fine.basis) == (1, "guess")
    refused = attributor.attribute_now(sdk_support(REFUSED), OPTIONS)
    assert (refused.step, refused.agent, refused.basis) == (
        4,
        "support_agent",
        "caused-later-refusal",
    )
    assert refused.details["overruled_step"] == 1
    assert "could no longer be changed" in refused.reason
    assert refused.mode == "A.1"


def test_a_langgraph_workers_cancellation_carries_the_failed_exchange() -> None:
    # LangGraph: the worker cancels the order; asked later for an exchange, the tool
    # refuses and the worker relays it (only the first symptom counts).
    task = "Cancel my order ORD-1042, or if it has shipped exchange the blue mug for a red one."
    graph = run(
        task,
        step(0, "user", H, task),
        step(1, "supervisor", M, "retail_worker: handle order ORD-1042."),
        step(2, "retail_worker", L, "", tool_name="get_order",
             tool_arguments='{"order_id": "ORD-1042"}'),
        step(3, "get_order", T, '{"id": "ORD-1042", "status": "pending", "item": "blue mug"}',
             tool_name="get_order"),
        step(4, "retail_worker", L, "", tool_name="cancel_pending_order",
             tool_arguments='{"order_id": "ORD-1042", "reason": "no longer needed"}'),
        step(5, "cancel_pending_order", T, '{"id": "ORD-1042", "status": "cancelled"}',
             tool_name="cancel_pending_order"),
        step(6, "retail_worker", L, "", tool_name="exchange_order_items",
             tool_arguments='{"order_id": "ORD-1042", "item": "blue mug", "new": "red mug"}'),
        step(7, "exchange_order_items", T,
             "Error: order ORD-1042 status is cancelled; it cannot be exchanged.",
             tool_name="exchange_order_items"),
        step(8, "retail_worker", M, "Sorry, but ORD-1042 was already cancelled, so I cannot"
             " exchange the mug."),
    )  # fmt: skip
    assert causes(graph) == {
        4: [
            "retail_worker cancelled order ORD-1042 at step 4 (cancel_pending_order); at step"
            " 7 the order could no longer be changed: “Error: order ORD-1042 status is"
            " cancelled; it cannot be exchanged.”"
        ]
    }


def airline(*steps: tuple[str, StepKind, str, dict[str, str]]) -> Trajectory:
    """A τ-bench-like airline conversation: a simulated user and an assistant with tools."""
    return Trajectory(
        run_id="r",
        task=steps[0][2],
        steps=tuple(
            Step(index=i, agent=agent, kind=kind, content=content, **fields)  # type: ignore[arg-type]
            for i, (agent, kind, content, fields) in enumerate(steps)
        ),
        metadata={"simulated_user": True, "roster": ["assistant", "user"]},
    )


def test_a_simulated_users_booking_changed_too_early_is_the_assistants_call() -> None:
    # The assistant writes its calls as text; the user then asks for the change it meant.
    flights = '[{"flight_number": "HAT045", "date": "2024-05-20"}]'
    chat = airline(
        ("user", H, "Hi, I want to move reservation HATHAT to the 20th and go business.", {}),
        ("assistant", M, 'get_reservation_details({"reservation_id": "HATHAT"})', {}),
        ("tool", T, '{"reservation_id": "HATHAT", "cabin": "economy", "flights": []}',
         {"tool_name": "get_reservation_details"}),
        ("assistant", M, 'update_reservation_flights({"reservation_id": "HATHAT",'
         f' "cabin": "economy", "flights": {flights}}})', {}),
        ("tool", T, '{"reservation_id": "HATHAT", "cabin": "economy"}',
         {"tool_name": "update_reservation_flights"}),
        ("user", H, "Wait, I said business class. Please upgrade it.", {}),
        ("assistant", M, "I'm sorry, reservation HATHAT is no longer eligible for changes"
         " after today's flight update.", {}),
    )  # fmt: skip
    assert list(causes(chat)) == [3]
    assert causes(chat)[3][0].startswith("assistant updated reservation HATHAT at step 3")


def test_a_crews_tool_record_answers_to_the_agent_that_called_it() -> None:
    # CrewAI: the order manager's tool call is recorded under its name, call and answer in
    # one step; the writer later finds the order can no longer be updated.
    task = "Update order A7731 to express shipping and add gift wrap."
    crew = run(
        task,
        step(0, "user", H, task),
        step(1, "Order Manager", M, "I'll set the shipping speed on order A7731 first."),
        step(2, "Order Manager", T, "", tool_name="Update Order Tool",
             tool_arguments='{"order_id": "A7731", "shipping": "express"}',
             tool_result="Order A7731 updated: shipping express, status processed"),
        step(3, "Support Writer", M, "Unfortunately, order A7731 cannot be updated any more,"
             " so gift wrap cannot be added."),
    )  # fmt: skip
    assert list(causes(crew)) == [1]


# --- what is no consequence of an earlier call ----------------------------------------


def retail(*middle: Step, refusal_text: str = REFUSED) -> Trajectory:
    """A support conversation: the task, the given calls, then the agent's refusal."""
    steps = [step(0, "user", H, TASK), *middle]
    steps.append(step(len(steps), "support_agent", M, refusal_text))
    return run(TASK, *steps)


def lookup(i: int, order: str = ORDER) -> tuple[Step, Step]:
    return (
        step(i, "support_agent", L, "", tool_name="get_order_details",
             tool_arguments=f'{{"order_id": "{order}"}}'),
        step(i + 1, "get_order_details", T, DETAILS, tool_name="get_order_details"),
    )  # fmt: skip


def modify(i: int, answer: str, order: str = ORDER) -> tuple[Step, Step]:
    arguments = f'{{"order_id": "{order}", "item_ids": ["1008292230"]}}'
    return (
        step(i, "support_agent", L, "", tool_name="modify_pending_order_items",
             tool_arguments=arguments),
        step(i + 1, "modify_pending_order_items", T, answer,
             tool_name="modify_pending_order_items"),
    )  # fmt: skip


def test_a_refusal_with_no_earlier_call_on_its_order_has_no_cause() -> None:
    assert causes(retail()) == {}
    assert causes(retail(*lookup(1))) == {}  # a look-up changes nothing


def test_a_call_that_failed_changed_nothing() -> None:
    failed = retail(*modify(1, "Error: new item 1008292231 is not available"))
    assert causes(failed) == {}
    assert list(causes(retail(*modify(1, '{"status": "pending"}')))) == [1]


def test_a_failed_call_its_answer_records_again_changed_nothing() -> None:
    # OpenAI Agents SDK: the tool's answer repeats the call's arguments.
    call, _ = modify(1, "")
    answer = step(2, "modify_pending_order_items", T, "Error: payment method gift_card_9 not found",
                  tool_name=call.tool_name, tool_arguments=call.tool_arguments)  # fmt: skip
    assert causes(retail(call, answer)) == {}
    ok = answer.model_copy(update={"content": '{"status": "pending"}'})
    assert list(causes(retail(call, ok))) == [1]


def test_a_refusal_answering_the_call_itself_is_not_its_own_cause() -> None:
    refused = "Order #W2378156 has already been modified; it cannot be modified again."
    assert causes(retail(*modify(1, refused))) == {}


def test_a_change_to_another_order_is_no_cause() -> None:
    other = retail(*modify(1, '{"status": "pending"}', order="#W9931004"))
    assert causes(other) == {}


def test_a_refusal_before_any_call_is_the_only_symptom_of_its_order() -> None:
    # The user reports the refusal first; the agent's later modification and its own
    # refusal come after the problem already showed.
    told = f"The site says order {ORDER} has already been modified and cannot be changed again."
    early = run(
        told,
        step(0, "user", H, told),
        *modify(1, '{"status": "pending"}'),
        step(3, "support_agent", M, REFUSED),
    )
    assert causes(early) == {}


def test_an_agent_saying_what_it_did_itself_refuses_nothing() -> None:
    done = retail(
        *modify(1, '{"status": "pending"}'),
        refusal_text=f"I have already modified order {ORDER}; the lamp is now black.",
    )
    assert causes(done) == {}
