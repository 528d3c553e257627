"""Step features on hand-built trajectories: each feature means what its docstring says."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultfinder.attributors.learned.features import (
    CONTEXT_FEATURES,
    FEATURES,
    PREFIX_FEATURES,
    STEP_FEATURES,
    extract_final_answer,
    feature_names,
    step_features,
)
from faultfinder.attributors.learned.features import prefix as prefix_scanning
from faultfinder.attributors.learned.features import text as text_facts
from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.datasets import BenchmarkRecord


def run(*steps: tuple[str, StepKind, str], **fields: object) -> Trajectory:
    return Trajectory(
        run_id=str(fields.pop("run_id", "run-1")),
        steps=tuple(
            Step(index=i, agent=agent, kind=kind, content=content)
            for i, (agent, kind, content) in enumerate(steps)
        ),
        **fields,  # type: ignore[arg-type]
    )


def table(trajectory: Trajectory, **options: bool) -> list[dict[str, float]]:
    prefix_only = options.get("prefix_only", False)
    names = feature_names(prefix_only=prefix_only)
    return [dict(zip(names, row, strict=True)) for row in step_features(trajectory, **options)]


CRASHING_CODER = run(
    ("human", StepKind.HUMAN, "How many rows does data.csv have? Answer with a number."),
    ("Planner", StepKind.MESSAGE, "Plan: Coder loads the file and counts the rows."),
    (
        "Coder",
        StepKind.MESSAGE,
        "```python\nimport pandas as pd\nprint(len(pd.read_csv('d')))\n```",
    ),
    (
        "Computer_terminal",
        StepKind.TOOL,
        "exitcode: 1 (execution failed)\nTraceback (most recent call last):\n"
        "FileNotFoundError: [Errno 2] No such file or directory: 'd'",
    ),
    ("Coder", StepKind.MESSAGE, "Let's assume the file has 12 rows. The answer is 12."),
    ("Checker", StepKind.MESSAGE, "This is incorrect: the count was never computed."),
    ("Planner", StepKind.MESSAGE, "FINAL ANSWER: 12\nTERMINATE"),
    task="How many rows does data.csv have? Answer with a number.",
    ground_truth="7",
)


def test_feature_names_are_unique_documented_and_prefix_features_are_a_subset() -> None:
    names = [f.name for f in FEATURES]
    assert len(names) == len(set(names))
    assert all(f.doc.strip() for f in FEATURES)
    assert set(feature_names(prefix_only=True)) < set(names)
    assert [f.name for f in PREFIX_FEATURES] == list(feature_names(prefix_only=True))


def test_one_row_per_step_in_feature_order() -> None:
    rows = step_features(CRASHING_CODER)
    assert len(rows) == len(CRASHING_CODER)
    assert all(len(row) == len(FEATURES) for row in rows)
    prefix_rows = step_features(CRASHING_CODER, prefix_only=True)
    assert all(len(row) == len(PREFIX_FEATURES) for row in prefix_rows)


def test_context_columns_hold_the_highest_value_before_and_after_each_step(
    who_and_when: list[BenchmarkRecord],
) -> None:
    names = feature_names()
    assert names == tuple(f.name for f in (*STEP_FEATURES, *CONTEXT_FEATURES))
    assert len(CONTEXT_FEATURES) == 2 * len(STEP_FEATURES)
    for trajectory in [CRASHING_CODER] + [r.trajectory for r in who_and_when[::31]]:
        rows = table(trajectory)
        for i, row in enumerate(rows):
            for feature in STEP_FEATURES:
                name = feature.name
                earlier = [r[name] for r in rows[:i]]
                later = [r[name] for r in rows[i + 1 :]]
                assert row[f"{name}_max_before"] == (max(earlier) if earlier else 0.0)
                assert row[f"{name}_max_after"] == (max(later) if later else 0.0)
    # The auditor's columns: the prefix-safe ones and their highest value so far.
    prefix = table(CRASHING_CODER, prefix_only=True)
    assert prefix[3]["error_in_step_max_before"] == 0.0 < prefix[3]["error_in_step"]
    assert prefix[4]["error_in_step_max_before"] == prefix[3]["error_in_step"]
    assert "error_after_max_before" not in prefix[0]


def test_position_features() -> None:
    rows = table(CRASHING_CODER)
    assert [r["position"] for r in rows] == list(range(7))
    assert rows[0]["relative_position"] == 0.0
    assert rows[-1]["relative_position"] == 1.0
    assert rows[3]["relative_position"] == pytest.approx(0.5)
    assert rows[-1]["log_steps_to_end"] == 0.0
    assert rows[0]["log_steps_to_end"] > rows[1]["log_steps_to_end"]


def test_kinds_and_acting_steps() -> None:
    rows = table(CRASHING_CODER)
    assert [r["is_acting"] for r in rows] == [0, 1, 1, 0, 1, 1, 1]
    assert rows[0]["kind_human"] == 1.0
    assert rows[3]["kind_tool"] == 1.0
    assert rows[1]["is_first_acting"] == 1.0
    assert sum(r["is_first_acting"] for r in rows) == 1.0
    assert rows[4]["acting_rank"] == 2.0  # Planner and the Coder's first turn act before it


def test_agent_turn_features() -> None:
    rows = table(CRASHING_CODER)
    # Coder speaks at 2 and 4: the first is its first turn, the second its last.
    assert rows[2]["agent_first_turn"] == 1.0 and rows[2]["agent_last_turn"] == 0.0
    assert rows[4]["agent_first_turn"] == 0.0 and rows[4]["agent_last_turn"] == 1.0
    assert rows[4]["agent_turn"] == 1.0
    assert rows[6]["agent_is_first_speaker"] == 1.0  # Planner spoke first
    assert rows[5]["agent_is_first_speaker"] == 0.0
    assert rows[2]["agents_before"] == 2.0  # human, Planner


def test_error_features_point_at_the_code_that_failed() -> None:
    rows = table(CRASHING_CODER)
    assert rows[3]["error_in_step"] == 1.0  # the traceback itself
    assert rows[2]["error_in_step"] == 0.0  # the code is a plan, not an observed error
    assert rows[2]["error_after"] == 1.0  # its terminal result failed
    assert rows[2]["first_error_blame"] == 1.0
    assert sum(r["first_error_blame"] for r in rows) == 1.0
    assert rows[4]["error_in_previous"] == 1.0
    assert rows[3]["first_error_here"] == 1.0
    assert rows[4]["errors_before"] > 0.0 and rows[2]["errors_before"] == 0.0
    assert rows[2]["agent_error_share"] == 1.0  # the Coder owns the only error
    assert rows[1]["agent_error_share"] == 0.0


def test_text_cues() -> None:
    rows = table(CRASHING_CODER)
    assert rows[2]["code_blocks"] == 1.0
    assert rows[4]["hedging"] == 1.0  # "Let's assume"
    assert rows[2]["hedging"] == 0.0
    assert rows[6]["terminates"] == 1.0
    assert rows[4]["criticised_next"] == 1.0  # the Checker calls it incorrect
    assert rows[2]["criticised_next"] == 0.0
    sorry = run(("A", StepKind.MESSAGE, "Unfortunately I cannot open the page; I verified it."))
    row = table(sorry)[0]
    assert row["apology"] == 1.0 and row["verification"] == 1.0


def test_ground_truth_features_and_their_withholding() -> None:
    rows = table(CRASHING_CODER)
    # The terminal's exit code and errno are the first numbers that are not 7; the
    # Coder's 12 contradicts the truth too, but not for the first time.
    assert [r["numbers_contradict_gt"] for r in rows] == [0, 0, 0, 1, 1, 0, 1]
    assert [r["first_numbers_contradict_gt"] for r in rows] == [0, 0, 0, 1, 0, 0, 0]
    assert all(r["gt_mentioned"] == 0.0 for r in rows)
    withheld = table(CRASHING_CODER, use_ground_truth=False)
    for name in ("numbers_contradict_gt", "first_numbers_contradict_gt", "gt_mentioned"):
        assert all(r[name] == 0.0 for r in withheld)

    right = run(
        ("A", StepKind.MESSAGE, "Searching."),
        ("B", StepKind.MESSAGE, "The answer is Holabird & Roche."),
        ("A", StepKind.MESSAGE, "Holabird it is."),
        ground_truth="Holabird",
    )
    mentioned = table(right)
    assert [r["gt_mentioned"] for r in mentioned] == [0.0, 1.0, 1.0]
    assert [r["gt_mentioned_before"] for r in mentioned] == [0.0, 0.0, 1.0]


def test_final_answer_first_mention_marks_where_the_wrong_answer_came_from() -> None:
    assert extract_final_answer(CRASHING_CODER) == "12"
    rows = table(CRASHING_CODER)
    assert [r["final_answer_first_mention"] for r in rows] == [0, 0, 0, 0, 1, 0, 0]
    given = CRASHING_CODER.model_copy(update={"final_answer": "7"})
    # The final answer equals the truth: nothing to trace back.
    assert all(r["final_answer_first_mention"] == 0 for r in table(given))


def test_repetition_and_loops() -> None:
    page = "I scrolled down one page in the browser. The page shows the archive of 2015."
    looping = run(
        *[("Surfer", StepKind.MESSAGE, page) for _ in range(4)],
        ("Surfer", StepKind.MESSAGE, "I typed a new query about bridges into the search box."),
    )
    rows = table(looping)
    assert rows[0]["repetition"] == 0.0
    assert rows[1]["repetition"] == 1.0
    assert rows[3]["loop_count"] > rows[1]["loop_count"] > 0.0
    assert rows[4]["repetition"] < 0.5
    assert rows[3]["new_words"] == 0.0 and rows[0]["new_words"] == 1.0


def test_handoffs_and_instructions() -> None:
    plain = run(
        ("Orchestrator", StepKind.MESSAGE, "Plan the search."),
        ("Orchestrator", StepKind.HANDOFF, "Search the NASA archive for August 2015 pictures."),
        ("WebSurfer", StepKind.MESSAGE, "I searched the NASA archive for August 2015."),
        ("Orchestrator", StepKind.MESSAGE, "Next speaker Assistant"),
        ("Assistant", StepKind.MESSAGE, "Here is some unrelated code."),
    )
    handoff = plain.steps[1].model_copy(update={"metadata": {"handoff_to": "WebSurfer"}})
    team = plain.model_copy(update={"steps": (plain.steps[0], handoff, *plain.steps[2:])})
    rows = table(team)
    assert rows[1]["kind_handoff"] == 1.0
    assert rows[3]["kind_handoff"] == 1.0  # "Next speaker X" hands off too
    assert rows[2]["answers_handoff"] == 1.0
    assert rows[4]["answers_handoff"] == 1.0
    assert rows[0]["answers_handoff"] == 0.0
    assert rows[2]["instruction_overlap"] > 0.5
    assert rows[0]["instruction_overlap"] == 0.0


def test_progress_ledgers() -> None:
    stalled = '{"is_in_loop": {"reason": "same page again", "answer": true}}'
    fine = '{"is_in_loop": {"reason": "new page", "answer": false}}'
    team = run(
        ("WebSurfer", StepKind.MESSAGE, "I clicked a link."),
        ("Orchestrator", StepKind.MESSAGE, stalled),
        ("WebSurfer", StepKind.MESSAGE, "I clicked another link."),
        ("Orchestrator", StepKind.MESSAGE, fine),
        ("WebSurfer", StepKind.MESSAGE, "Done."),
    )
    rows = table(team)
    assert rows[0]["ledger_stalled_after"] == 1.0
    assert rows[2]["ledger_stalled_after"] == 0.0
    assert rows[2]["ledger_stalled_before"] == 1.0
    assert rows[4]["ledger_stalled_before"] == 0.0


def test_agent_share() -> None:
    rows = table(CRASHING_CODER)
    assert rows[2]["agent_share"] == pytest.approx(2 / 7)
    assert rows[0]["agent_share"] == pytest.approx(1 / 7)


def test_empty_task_and_single_step_do_not_break() -> None:
    rows = table(run(("A", StepKind.MESSAGE, "")))
    assert rows[0]["relative_position"] == 0.0
    assert rows[0]["task_overlap"] == 0.0
    assert step_features(Trajectory(run_id="empty")) == []


_AGENTS = st.sampled_from(["Planner", "Coder", "Computer_terminal", "WebSurfer"])
_KINDS = st.sampled_from([StepKind.MESSAGE, StepKind.TOOL, StepKind.HANDOFF])
_TEXTS = st.sampled_from([
    "exitcode: 1 Traceback (most recent call last): KeyError: 'x'",
    "The answer is 42. TERMINATE",
    "Let's assume the value is 7.",
    "I scrolled down one page.",
    '{"is_progress_being_made": {"reason": "no", "answer": false}}',
    "Next speaker Coder",
    "",
])  # fmt: skip


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_AGENTS, _KINDS, _TEXTS), min_size=1, max_size=12), st.booleans())
def test_prefix_features_never_depend_on_later_steps(
    steps: list[tuple[str, StepKind, str]], use_ground_truth: bool
) -> None:
    full = run(*steps, task="Compute the value.", ground_truth="42")
    rows = step_features(full, prefix_only=True, use_ground_truth=use_ground_truth)
    for end in range(1, len(full) + 1):
        prefix = full.model_copy(update={"steps": full.steps[:end]})
        assert (
            step_features(prefix, prefix_only=True, use_ground_truth=use_ground_truth) == rows[:end]
        )


# --- the fast paths compute exactly what their plain definitions do -------------------

# Digests of the feature matrices of every Who&When record (with and without ground
# truth, all features and prefix-safe ones), recorded from the straightforward
# implementation before its scans were made faster. A change of any feature value on
# the benchmark shows here, naming the records. After a deliberate change of a feature,
# rewrite the file with `json.dumps({record_id: feature_digest(trajectory) …},
# indent=0, sort_keys=True)` over `load_dataset("who_and_when")`.
DIGESTS = Path(__file__).parent / "data" / "who_and_when_feature_digests.json"


def feature_digest(trajectory: Trajectory) -> str:
    """Of the step features only: the context columns are derived from them (and checked
    against their definition below)."""
    digest = hashlib.sha256()
    for use_ground_truth in (True, False):
        for prefix_only in (False, True):
            rows = step_features(
                trajectory, use_ground_truth=use_ground_truth, prefix_only=prefix_only
            )
            own = sum(f.prefix_safe or not prefix_only for f in STEP_FEATURES)
            digest.update(repr([row[:own] for row in rows]).encode())  # every float bit counts
    return digest.hexdigest()[:16]


def test_features_of_every_who_and_when_record_are_unchanged(
    who_and_when: list[BenchmarkRecord],
) -> None:
    expected = json.loads(DIGESTS.read_text())
    found = {r.record_id: feature_digest(r.trajectory) for r in who_and_when}
    assert {r.split("/")[0] for r in found} == {"algorithm-generated", "hand-crafted"}
    changed = sorted(r for r in expected if found.get(r) != expected[r])
    assert found.keys() == expected.keys()
    assert not changed, f"{len(changed)} records' features changed, e.g. {changed[:5]}"


# The patterns the fast paths stand in for, as first written.
_WORD = re.compile(r"[a-z0-9]+")
_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])")
_MAYBE_ERROR = re.compile(
    r"traceback|exit\s*code|error|exception|http(?:/\d(?:\.\d)?)?\s*[45]\d\d"
    r"|status(?:\s+code)?:?\s*[45]\d\d|fail|not\s+found|unable\s+to|cannot|can't|can not"
    r"|could not|couldn't"
)

# Texts built from the patterns' own fragments, glued by characters that do and do not
# end a word (underscore, accented and non-Latin letters, digits, punctuation).
GLUE = (" ", "", "\n", "_", "é", "ß", "ǅ", "ſ", "K", "İ", "-", ".", ",", "'", "7", "x")
FRAGMENTS = (
    "error", "errors", "exit code", "exitcode", "http 404", "http/1.1 500", "status: 503",
    "status code 42", "not  found", "unable to", "can't", "cannot", "could not", "fail",
    "assume", "assumption", "made-up", "made up", "let's suppose", "sample data", "for",
    "i can't", "i'm unable", "no results found", "no information available", "sorry",
    "did not", "didn't", "does not", "doesn't", "not accurate", "issues", "inaccuracy",
    "discrepancies", "verified", "double-check", "terminate", "final answer:", "mock",
    "mocked", "dummy", "-12", "3.5", "1,000", "v2", "a1.5", "-", "0.",
    "Traceback (most recent call last)", "KeyError:", "Error:", "EXIT CODE: 2", "Unable To",
    "404 Client Error", "apologize", "unfortunately", "not able to access", "i am unable",
    "hypothetically", "simulation", "placeholder", "fictional", "for illustrative",
    "example data", "for demonstration", "wrong", "mistake", "incorrect", "overlooked",
    "missed", "not correct", "inaccurate", "confirms", "assumed", "assuming", "hypothetical",
    "simulate", "simulated", "simulating", "discrepancy", "issue", "apologise", "i cannot",
    "i was unable", "exception", "can not", "couldn't",
)  # fmt: skip
# Every fragment alone between every pair of glue characters, then random mixtures.
SHORT_TEXTS = [before + text + after for text in FRAGMENTS for before in GLUE for after in GLUE]
_MIXTURES = st.lists(st.tuples(st.sampled_from(GLUE), st.sampled_from(FRAGMENTS)), max_size=8)


def scans_agree(text: str) -> None:
    lowered = text.casefold()
    assert text_facts._words(lowered) == _WORD.findall(lowered)
    assert text_facts._NUMBER.findall(text) == _NUMBER.findall(text)
    assert text_facts._maybe_error(lowered) == bool(_MAYBE_ERROR.search(lowered))


def cues_agree(text: str) -> None:
    lowered = text.casefold()
    words = frozenset(text_facts._words(lowered))
    for cue_words, hints, pattern in (
        (text_facts._HEDGING_WORDS, text_facts._HEDGING_HINTS, text_facts._HEDGING),
        (text_facts._APOLOGY_WORDS, text_facts._APOLOGY_HINTS, text_facts._APOLOGY),
        (text_facts._CRITICISM_WORDS, text_facts._CRITICISM_HINTS, text_facts._CRITICISM),
    ):
        expected = float(bool(pattern.search(lowered)))
        assert text_facts._word_cue(lowered, words, cue_words, hints, pattern) == expected
    for cue_hints, pattern in (
        (text_facts._VERIFY_HINTS, text_facts._VERIFY),
        (text_facts._TERMINATE_HINTS, text_facts._TERMINATE),
    ):
        expected = float(bool(pattern.search(lowered)))
        assert text_facts._cue(lowered, cue_hints, pattern) == expected


def test_fast_scans_equal_their_regex_definitions_on_every_fragment() -> None:
    for text in SHORT_TEXTS:
        scans_agree(text)
        cues_agree(text)


@settings(max_examples=200)
@given(st.one_of(_MIXTURES.map(lambda parts: "".join(g + f for g, f in parts)), st.text()))
def test_fast_scans_equal_their_regex_definitions_on_mixtures(text: str) -> None:
    scans_agree(text)
    cues_agree(text)


@given(st.frozensets(st.integers(0, 30)), st.frozensets(st.integers(0, 30)))
def test_loop_pre_check_only_skips_dissimilar_steps(a: frozenset[int], b: frozenset[int]) -> None:
    words_a = frozenset(map(str, a))
    words_b = frozenset(map(str, b))
    if not prefix_scanning._may_loop(words_a, words_b):
        assert prefix_scanning._jaccard(words_a, words_b) < prefix_scanning._LOOP_SIMILARITY
