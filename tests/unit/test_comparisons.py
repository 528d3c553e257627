"""What an agent says of records its tools returned is checked against them: a
superlative they contradict, a figure of one record given to another or to a name that is
no record at all."""

from __future__ import annotations

import orjson

from faultfinder.attributors.base import AttributeOptions, get_attributor
from faultfinder.attributors.comparisons import RecordChecks, records_in
from faultfinder.attributors.heuristics import is_acting_step
from faultfinder.attributors.learned.attributor import Decision, _evidence_first
from faultfinder.attributors.learned.evidence import DECISIVE_STRENGTH, Evidence
from faultfinder.attributors.model import Step, StepKind, Trajectory

FLIGHTS = [
    {"flight": "TP 433", "eur": 89, "stops": 0, "departs": "07:05"},
    {"flight": "AF 1024", "eur": 140, "stops": 0, "departs": "09:10"},
]
"""TP 433 is the cheapest; a record is named by the field the sentence names the other by
(the flight, not its shorter departure time)."""


def _run(
    claim: str,
    output: object = FLIGHTS,
    *,
    final: str = "AF 1024",
    task: str = "Book the cheapest Friday flight from Paris to Lisbon.",
) -> Trajectory:
    search = "flights.search"
    steps = [
        Step(index=0, agent="Planner", kind=StepKind.MESSAGE, content="Searcher: list flights."),
        Step(
            index=1,
            agent="Searcher",
            kind=StepKind.MESSAGE,
            content="Searching.",
            tool_name=search,
            tool_arguments='{"from": "CDG", "to": "LIS"}',
        ),
        Step(
            index=2,
            agent=search,
            kind=StepKind.TOOL,
            content=output if isinstance(output, str) else orjson.dumps(output).decode(),
            tool_name=search,
        ),
        Step(index=3, agent="Analyst", kind=StepKind.MESSAGE, content=claim),
        Step(index=4, agent="Planner", kind=StepKind.MESSAGE, content=f"Booking {final}."),
    ]
    return Trajectory(
        run_id="flights",
        task=task,
        final_answer=final,
        steps=tuple(steps),
    )


def _finding(trajectory: Trajectory) -> tuple[int, str] | None:
    checks = RecordChecks(trajectory.task)
    for step in trajectory.steps:
        found = checks.push(step, acting=is_acting_step(step))
        if found is not None:
            return step.index, found.said_by(step.agent)
    return None


def test_a_superlative_the_records_contradict_is_found_and_said_in_words() -> None:
    found = _finding(_run("The cheapest option is AF 1024, leaving at 9:10."))
    assert found == (
        3,
        "Analyst called AF 1024 the cheapest after flights.search had returned TP 433 with"
        " eur 89 against 140 for AF 1024",
    )


def test_a_superlative_the_records_support_or_cannot_judge_is_not_evidence() -> None:
    assert _finding(_run("The cheapest option is TP 433.", final="TP 433")) is None
    # The most expensive one is AF 1024: true.
    assert _finding(_run("AF 1024 is the most expensive; TP 433 is fine.")) is None
    # Two records named in the one sentence: which one is called cheapest is unclear.
    assert _finding(_run("Of TP 433 and AF 1024, the cheapest is clear.")) is None
    # No superlative, or a record no list holds.
    assert _finding(_run("AF 1024 leaves at 9:10.")) is None
    assert _finding(_run("The cheapest is LH 1170.")) is None


def test_the_field_the_sentence_names_decides_and_constant_fields_say_nothing() -> None:
    timed = [
        {"flight": "TP 433", "eur": 89, "minutes": 150},
        {"flight": "AF 1024", "eur": 140, "minutes": 95},
    ]
    assert _finding(_run("AF 1024 has the shortest minutes in the air.", timed)) is None
    found = _finding(_run("TP 433 has the lowest minutes in the air.", timed))
    assert found is not None and "AF 1024 with minutes 95 against 150 for TP 433" in found[1]


def test_records_are_read_from_json_lists_nested_lists_and_objects_keyed_by_name() -> None:
    keyed = {"TP 433": {"eur": 89}, "AF 1024": {"eur": 140}}
    found = _finding(_run("The cheapest is AF 1024.", keyed))
    assert found is not None and "TP 433 with eur 89" in found[1]
    (wrapped,) = records_in(orjson.dumps({"results": FLIGHTS, "count": 2}).decode(), "search")
    assert len(wrapped.names) == 2
    # The Python literal a framework sends when it str()s a tool's return value.
    (literal,) = records_in(str(FLIGHTS), "search")
    assert literal.numbers[1]["eur"] == 140
    assert records_in("TP 433: 89 EUR; AF 1024: 140 EUR", "search") == []
    assert records_in("[" * 100_000, "search") == []  # too deep to parse: no records
    assert records_in('[{"flight": "TP 433"}]', "search") == []  # one record compares nothing
    assert records_in("[{not json", "search") == []


ORDER = {
    "order_id": "#W2611340",
    "items": [
        {"name": "Water Bottle", "item_id": "6469567736", "price": 47.84},
        {"name": "Office Chair", "item_id": "8426249116", "price": 488.81},
    ],
    "payment_history": [{"transaction_type": "payment", "amount": 536.65}],
}
"""An order as a retail tool returns it: its items are a list nested inside it."""


def test_a_figure_of_one_record_given_to_another_is_found_and_said_in_words() -> None:
    found = _finding(_run("The Office Chair was 47.84, so you get 47.84 back.", ORDER))
    assert found == (
        3,
        "Analyst gave Office Chair the figure 47.84, which flights.search had returned as the"
        " price of Water Bottle (Office Chair's is 488.81)",
    )


def test_a_record_given_its_own_figure_or_compared_with_another_is_not_evidence() -> None:
    assert _finding(_run("The Office Chair was 488.81.", ORDER)) is None
    # Its own figure beside another's: a comparison, not a mix-up.
    compared = "The Office Chair, at 488.81, cost far more than the 47.84 of the bottle."
    assert _finding(_run(compared, ORDER)) is None
    # A figure no other record holds (a total, a refund after fees) is provenance's to judge.
    assert _finding(_run("The Office Chair refund comes to 480.00.", ORDER)) is None
    # The digits of a record's name are its name, not a figure given to it, even when
    # another record holds that number.
    numbered = [{"flight": "AF 1024", "eur": 140}, {"flight": "TP 433", "eur": 1024}]
    assert _finding(_run("AF 1024 is fully booked.", numbered)) is None
    # Nor a figure given to another name, when the sentence names the flight by them.
    assert _finding(_run("The eur fare of Iberia on AF 1024 is unknown.", numbered)) is None


async def test_the_zero_llm_attributors_blame_the_step_the_records_prove_wrong_and_say_why() -> (
    None
):
    cases = [
        (
            _run("Compared the list: the cheapest option is AF 1024."),
            "called AF 1024 the cheapest after flights.search had returned TP 433",
        ),
        (
            _run("Refund: the Office Chair was 47.84.", ORDER, final="47.84"),
            "gave Office Chair the figure 47.84, which flights.search had returned as the price"
            " of Water Bottle",
        ),
    ]
    for trajectory, why in cases:
        for method in ("learned", "first_error"):
            attribution = await get_attributor(method).attribute(trajectory, AttributeOptions())
            assert (attribution.step, attribution.agent) == (3, "Analyst"), attribution.reason
            assert why in attribution.reason, attribution.reason


def test_an_infinite_value_in_the_records_is_said_not_crashed_on() -> None:
    huge = '[{"flight": "TP 433", "eur": 1e999}, {"flight": "AF 1024", "eur": 140}]'
    checks = RecordChecks()
    tool = Step(index=0, agent="search", kind=StepKind.TOOL, content=huge, tool_name="search")
    checks.push(tool, acting=False)
    claim = Step(index=1, agent="Analyst", kind=StepKind.MESSAGE, content="TP 433 is cheapest.")
    found = checks.push(claim, acting=True)
    assert found is not None and "against inf for TP 433" in found.said_by("Analyst")


STOCK = (
    "Warehouse Leeds: stock 1,240 units; capacity 2,000 units; dock doors 6\n"
    "Warehouse Bristol: stock 310 units; capacity 800 units; dock doors 2"
)
"""A prose report, one record a line: `Name: field value; field value`."""
STOCK_TASK = "How many units can we ship today from the warehouse with the most stock?"


def test_prose_lines_with_values_are_records_named_by_their_heading() -> None:
    (records,) = records_in(STOCK, "inventory")
    assert records.names == ({"": "Warehouse Leeds"}, {"": "Warehouse Bristol"})
    assert records.numbers[0] == {"stock": 1240.0, "capacity": 2000.0, "dock doors": 6.0}
    # A heading with one figure after it is a heading, not a record.
    assert records_in("Code output: Menu on March 22, 2021", "terminal") == []
    assert records_in("Note: all figures are approximate.", "terminal") == []


def test_a_superlative_prose_records_contradict_is_found() -> None:
    found = _finding(_run("Warehouse Bristol has the largest stock.", STOCK, task=STOCK_TASK))
    assert found == (
        3,
        "Analyst called Warehouse Bristol the largest after flights.search had returned"
        " Warehouse Leeds with stock 1,240 against 310 for Warehouse Bristol",
    )
    assert _finding(_run("Warehouse Leeds has the largest stock.", STOCK, task=STOCK_TASK)) is None


def test_a_records_figure_given_to_another_name_is_found_and_said_in_words() -> None:
    found = _finding(_run("The stock of Warehouse York is 1,240 units.", STOCK, task=STOCK_TASK))
    assert found == (
        3,
        "Analyst gave Warehouse York the figure 1,240, which flights.search had returned as"
        " the stock of Warehouse Leeds",
    )


def test_a_figure_said_of_its_record_or_of_what_the_task_names_is_not_evidence() -> None:
    def finding(claim: str, task: str = STOCK_TASK) -> tuple[int, str] | None:
        return _finding(_run(claim, STOCK, task=task))

    assert finding("The stock of Warehouse Leeds is 1,240 units.") is None
    # The task's own words for the subject ("the northern warehouse") are its name too.
    northern = "How much stock does the Northern Warehouse hold?"
    assert finding("The Northern Warehouse holds a stock of 1,240 units.", northern) is None
    # A sum that does not say whose value it is names no subject to mix up.
    assert finding("We can ship 1,240 units with Parcelforce today.") is None
    # Nothing is named: there is nobody to give the figure to.
    assert finding("The largest stock is 1,240 units.") is None


def test_a_step_the_records_prove_wrong_leads_over_weaker_evidence_before_or_after() -> None:
    """Evidence leads by its strength: a step the run's own records prove wrong (0.9)
    leads over a model's top step whose evidence is weaker, a later turn that only first
    states the wrong answer (0.6) or an earlier made-up figure (0.75); against evidence
    as strong (a contradiction of its tool's report, 1.0) the model's order stands."""
    proven = Evidence(2, "misattributed-figure", DECISIVE_STRENGTH, "gave X Y's figure")

    def lead(top: Evidence) -> tuple[list[int], int | None]:
        evidence: list[list[Evidence]] = [[] for _ in range(6)]
        evidence[2].append(proven)
        evidence[top.step].append(top)
        return _evidence_first([top.step, 2, 0, 3], evidence)

    assert lead(Evidence(5, "first-to-state-final-answer", 0.6, "")) == ([2, 5, 0, 3], 5)
    assert lead(Evidence(5, "contradicts-report", 1.0, "")) == ([5, 2, 0, 3], None)
    assert lead(Evidence(1, "unsupported-figure", 0.75, "")) == ([2, 1, 0, 3], 1)


def test_a_lead_without_evidence_gives_way_to_evidence_whatever_the_model_saw() -> None:
    """A step with no evidence that the model ranks first (the returns desk's Clerk
    summing up the order, by its place, its wording or anything its features show) gives
    way to a step that carries evidence (the Cashier's calculator call with a figure
    nothing before it holds); a leader with evidence of its own keeps the lead, and a
    relayed figure is not the relaying step's own evidence."""
    evidence: list[list[Evidence]] = [[] for _ in range(6)]
    evidence[3].append(Evidence(3, "unsupported-figure", 0.75, "Cashier stated 4888.10"))
    assert _evidence_first([2, 3, 0, 5], evidence) == ([3, 2, 0, 5], 2)
    evidence[5].append(Evidence(5, "unsupported-argument", 0.7, "Cashier called refund"))
    assert _evidence_first([5, 2, 3, 0], evidence) == ([5, 2, 3, 0], None)
    evidence[2].append(Evidence(2, "repeats-unsupported-figure", 0.3, "Clerk repeated 4888.10"))
    assert _evidence_first([2, 3, 0, 5], evidence) == ([3, 2, 0, 5], 2)


def test_each_decision_shares_the_lead_between_evidence_and_the_model_as_it_says() -> None:
    """The model ranks the Clerk's summary (step 2, no evidence) first, then the
    Cashier's apology (step 5, a cue), then the Cashier's calculator call with a figure
    nothing before it holds (step 3, strong). In bands, strong evidence leads and the cue
    comes next; when only a bare lead yields, the strong step leads and the model's
    order stands behind it, and a lead that shows a cue keeps it; when only decisive
    evidence leads, the model's order stands until a step the records prove wrong
    appears (step 0), which then leads under every decision. Being the first to state
    the wrong final answer says where the wrong result surfaced, not what went wrong
    there: a bare leader yields to it only when any strong evidence will do."""
    evidence: list[list[Evidence]] = [[] for _ in range(6)]
    evidence[3].append(Evidence(3, "unsupported-figure", 0.75, "Cashier stated 4888.10"))
    evidence[5].append(Evidence(5, "gave-up", 0.3, "Cashier apologised"))

    def lead(order: list[int], decision: Decision) -> tuple[list[int], int | None]:
        return _evidence_first(order, evidence, decision)

    assert lead([2, 5, 3, 0], Decision.EVIDENCE_BANDS) == ([3, 5, 2, 0], 2)
    assert lead([2, 5, 3, 0], Decision.BARE_LEAD_YIELDS) == ([3, 2, 5, 0], 2)
    assert lead([2, 5, 3, 0], Decision.BARE_LEAD_YIELDS_TO_SPECIFIC) == ([3, 2, 5, 0], 2)
    assert lead([2, 5, 3, 0], Decision.DECISIVE_ONLY) == ([2, 5, 3, 0], None)
    assert lead([5, 2, 3, 0], Decision.EVIDENCE_BANDS) == ([3, 5, 2, 0], 5)
    assert lead([5, 2, 3, 0], Decision.BARE_LEAD_YIELDS) == ([5, 2, 3, 0], None)
    evidence[3] = [Evidence(3, "first-to-state-final-answer", 0.6, "Cashier said 4888.10")]
    assert lead([2, 5, 3, 0], Decision.BARE_LEAD_YIELDS) == ([3, 2, 5, 0], 2)
    assert lead([2, 5, 3, 0], Decision.BARE_LEAD_YIELDS_TO_SPECIFIC) == ([2, 5, 3, 0], None)
    evidence[0].append(Evidence(0, "misattributed-figure", DECISIVE_STRENGTH, "gave X Y's"))
    assert lead([2, 5, 3, 0], Decision.EVIDENCE_BANDS) == ([0, 3, 5, 2], 2)
    assert lead([2, 5, 3, 0], Decision.BARE_LEAD_YIELDS) == ([0, 2, 5, 3], 2)
    assert lead([2, 5, 3, 0], Decision.BARE_LEAD_YIELDS_TO_SPECIFIC) == ([0, 2, 5, 3], 2)
    assert lead([2, 5, 3, 0], Decision.DECISIVE_ONLY) == ([0, 2, 5, 3], 2)
