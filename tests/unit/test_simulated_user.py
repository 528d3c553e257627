"""A simulated user that withholds what its own instructions give it (τ-bench's customer
saying it has no user id, its instruction naming one) is blamed for that turn; what
looks like it but is not (the instruction tells it to forget, the run finds the id
anyway, a different kind of identifier, a plain user) is left alone."""

from __future__ import annotations

import asyncio

import pytest

from faultfinder.attributors.base import AttributeOptions
from faultfinder.attributors.heuristics import FirstError
from faultfinder.attributors.learned import LearnedAttributor
from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.attributors.simulated_user import withheld_by_user

M, T, H = StepKind.MESSAGE, StepKind.TOOL, StepKind.HUMAN
TOLD = (
    "You are ethan_martin_2396 and you are contacting to complain about your delayed flight"
    " HAT039. You want the airline to compensate you for the delay."
)


def chat(
    *steps: tuple[str, StepKind, str],
    instruction: str | None = TOLD,
    roster: tuple[str, ...] = ("assistant", "user"),
) -> Trajectory:
    metadata: dict[str, object] = {"simulated_user": True, "roster": list(roster)}
    if instruction is not None:
        metadata["user_instruction"] = instruction
    return Trajectory(
        run_id="r",
        task=steps[0][2],
        steps=tuple(
            Step(index=i, agent=agent, kind=kind, content=content)
            for i, (agent, kind, content) in enumerate(steps)
        ),
        metadata=metadata,
    )


OPENING = ("user", H, "Hi, my flight HAT039 was delayed and I want compensation.")
ASK = ("assistant", M, "I'm sorry. Could you give me your user ID so I can look you up?")
GIVE_UP = ("assistant", M, "I cannot help without your user ID, sorry.")
DENIED = chat(OPENING, ASK, ("user", H, "I don't have my user ID with me right now."), GIVE_UP)


def test_the_turn_that_withholds_the_id_is_found_and_named() -> None:
    found = withheld_by_user(DENIED)
    assert found is not None
    assert (found.step, found.user, found.kind, found.value) == (
        2,
        "user",
        "user id",
        "ethan_martin_2396",
    )
    assert "ethan_martin_2396" in found.text() and "don't have my user ID" in found.text()


@pytest.mark.parametrize(
    "said",
    [
        "I forgot my user id, sorry.",
        "I\u2019ve lost my user ID.",
        "I can't remember my username.",
        "I do not recall my user id at the moment.",
    ],
)
def test_other_ways_of_saying_it(said: str) -> None:
    assert withheld_by_user(chat(OPENING, ASK, ("user", H, said), GIVE_UP)) is not None


@pytest.mark.parametrize(
    ("told", "asked", "said", "found"),
    [
        (
            "You are Yusuf Rossi, email y.r@example.com. Return the keyboard.",
            "your email address?",
            "I don't remember my email.",
            ("email address", "y.r@example.com"),
        ),
        (
            "You want to return order #W2378156 as soon as you can (order ASAP).",
            "the order number?",
            "I don't have the order number.",
            ("reservation or order number", "W2378156"),
        ),
        (
            "You want to cancel reservation HXDUBJ.",
            "the reservation id?",
            "I don't have my reservation ID here.",
            ("reservation or order number", "HXDUBJ"),
        ),
        (
            "Your customer id is U-4821 and your parcel is late.",
            "your customer id?",
            "I can't find my customer ID.",
            ("user id", "U-4821"),
        ),
    ],
)
def test_identifiers_as_other_harnesses_write_them(
    told: str, asked: str, said: str, found: tuple[str, str]
) -> None:
    trajectory = chat(
        OPENING, ("assistant", M, f"Could you give me {asked}"), ("user", H, said), GIVE_UP,
        instruction=told,
    )  # fmt: skip
    withheld = withheld_by_user(trajectory)
    assert withheld is not None and (withheld.kind, withheld.value) == found


def test_a_pronoun_means_what_the_agent_just_asked_for() -> None:
    those = chat(OPENING, ASK, ("user", H, "Sorry, I don't have that with me."), GIVE_UP)
    assert withheld_by_user(those) is not None


@pytest.mark.parametrize(
    ("why", "trajectory"),
    [
        (
            "the run found the id anyway",
            chat(
                OPENING,
                ASK,
                ("user", H, "I don't have my user ID with me right now."),
                ("assistant", M, 'get_reservation_details({"reservation_id": "ZFA04Y"})'),
                ("get_reservation_details", T, '{"user_id": "ethan_martin_2396"}'),
            ),
        ),
        (
            "its instructions tell it to say so",
            chat(
                OPENING,
                ASK,
                ("user", H, "I don't have my user ID with me right now."),
                GIVE_UP,
                instruction=TOLD + " You do not remember your user id ethan_martin_2396.",
            ),
        ),
        (
            "it withholds another kind of identifier than the one it was given",
            chat(
                OPENING,
                ("assistant", M, "Could you give me the reservation ID?"),
                ("user", H, "I don't have the reservation ID right now."),
                GIVE_UP,
            ),
        ),
        (
            "it has no further questions",
            chat(OPENING, ASK, ("user", H, "I don't have any other questions, bye."), GIVE_UP),
        ),
        (
            "the run carries no instructions",
            chat(OPENING, ASK, ("user", H, "I don't have my user ID."), GIVE_UP, instruction=None),
        ),
        (
            "the user is not part of the system",
            chat(OPENING, ASK, ("user", H, "I don't have my user ID."), GIVE_UP, roster=()),
        ),
    ],
)
def test_what_is_not_withholding(why: str, trajectory: Trajectory) -> None:
    assert withheld_by_user(trajectory) is None, why


def test_both_zero_llm_attributors_blame_the_user_and_say_why() -> None:
    learned = LearnedAttributor().attribute_now(DENIED, AttributeOptions())
    first = asyncio.run(FirstError().attribute(DENIED, AttributeOptions()))
    for attribution in (learned, first):
        assert (attribution.agent, attribution.step) == ("user", 2), attribution.reason
        assert "ethan_martin_2396" in attribution.reason
    assert first.details["rule"] == "user-withheld"
