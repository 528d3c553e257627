"""The nightly suite file, the regression gate and the statistics under it (no database)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from faultfinder.attributors.scoring import mcnemar_exact_p, wilson_interval
from faultfinder.evaluation.nightly import DEFAULT_SUITE, SuiteError, compare, describe, load_suite
from faultfinder.evaluation.nightly.suite import endpoint_configured, in_sample, resolve_spec
from faultfinder.server.store import BenchEntry, BenchVerdict

# --- statistics -------------------------------------------------------------------------


def test_wilson_interval_matches_the_textbook_values_and_stays_inside_zero_one() -> None:
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = wilson_interval(45, 126)
    assert lo < 45 / 126 < hi and hi - lo < 0.2
    with pytest.raises(ValueError, match="between 0 and n"):
        wilson_interval(11, 10)


def test_exact_mcnemar_agrees_with_scipys_binomial_test() -> None:
    stats = pytest.importorskip("scipy.stats")
    for against in range(0, 13):
        for towards in range(0, 13):
            if against + towards == 0:
                continue
            expected = stats.binomtest(
                against, against + towards, 0.5, alternative="greater"
            ).pvalue
            assert mcnemar_exact_p(against, towards) == pytest.approx(expected), (against, towards)
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(6, 0) == pytest.approx(1 / 64)


# --- the suite file ---------------------------------------------------------------------


def test_the_default_suite_runs_zero_llm_attributors_and_an_llm_one_only_with_an_endpoint() -> None:
    suite = load_suite(DEFAULT_SUITE)
    keys = [entry.key for entry in suite.entries()]
    datasets = [d.name for d in suite.datasets]
    assert {"ww-algorithm-generated", "ww-hand-crafted", "injected-corpus"} <= set(datasets)
    for dataset in datasets:
        for attributor in ("first_error", "learned", "random"):
            assert f"{dataset}/{attributor}/with-ground-truth" in keys
    llm = [entry for entry in suite.entries() if entry.attributor.uses_model]
    assert [entry.key for entry in llm] == ["ww-hand-crafted/all_at_once/with-ground-truth"]
    assert llm[0].attributor.time_budget_s and llm[0].attributor.token_budget
    assert not endpoint_configured(llm[0].attributor, {})
    assert endpoint_configured(llm[0].attributor, {"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"})
    # The corpus path is the repository's, relative to the suite file.
    corpus = next(d for d in suite.datasets if d.name == "injected-corpus")
    assert corpus.spec is not None
    assert Path(resolve_spec(corpus.spec, DEFAULT_SUITE.parent)) == (
        Path(__file__).resolve().parents[2] / "data" / "corpus" / "injected"
    )
    assert resolve_spec("who_and_when:hand-crafted", Path("/x")) == "who_and_when:hand-crafted"


def test_the_digest_changes_with_the_suite_not_with_its_layout(tmp_path: Path) -> None:
    base = '[[datasets]]\nname = "a"\nspec = "who_and_when"\n[[attributors]]\nname = "random"\n'
    first, second, third = tmp_path / "1.toml", tmp_path / "2.toml", tmp_path / "3.toml"
    first.write_text('name = "s"\n' + base)
    second.write_text('# a comment\nname  =  "s"\n\n' + base)
    third.write_text('name = "s"\n' + base.replace("random", "first_error"))
    assert load_suite(first).digest == load_suite(second).digest != load_suite(third).digest


SUITE_START = 'name = "s"\n[[datasets]]\nname = "a"\nspec = "who_and_when"\n'
RANDOM = '[[attributors]]\nname = "random"\n'
BOTH_SOURCES = SUITE_START.replace('spec = "who_and_when"', 'database = true\nspec = "x"')


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SUITE_START + RANDOM + 'modle = "x"\n', r"attributors\[0\]\.modle: unknown key"),
        (SUITE_START + RANDOM + 'datasets = ["b"]\n', r"names datasets \['b'\]"),
        (SUITE_START + RANDOM + RANDOM, "used more than once"),
        (SUITE_START + RANDOM + 'model = "gpt"\n', "model settings apply to the LLM methods"),
        (SUITE_START + '[[attributors]]\nname = "a/b"\n', r"attributors\[0\]\.name"),
        (BOTH_SOURCES + RANDOM, "either `spec` or `database`"),
        (SUITE_START, "attributors: required key missing"),
        (SUITE_START + '[gate]\nmetrics = ["precision"]\n' + RANDOM, "unknown metrics"),
        ('name = "s"\n[[datasets]\n', "not valid TOML"),
    ],
)
def test_a_bad_suite_is_refused_naming_the_file_and_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "suite.toml"
    path.write_text(text)
    with pytest.raises(SuiteError, match=message) as caught:
        load_suite(path)
    assert str(caught.value).startswith(str(path))


# --- the gate ---------------------------------------------------------------------------


def records(step_right: list[bool], *, agent_right: bool = True) -> list[dict[str, Any]]:
    return [
        {
            "id": f"r{i}",
            "fingerprint": f"f{i}",
            "agent": agent_right,
            "step": right,
            "answer": {"agent": "A", "step": 1 if right else 2},
            "gold": {"agent": "A", "step": 1},
        }
        for i, right in enumerate(step_right)
    ]


def entry(step_right: list[bool], **changes: Any) -> BenchEntry:
    values: dict[str, Any] = {
        "run_id": "night-1", "entry": "d/a/s", "dataset": "d", "attributor": "a",
        "settings": "s", "method": "a", "code_version": "v1", "model": None, "started_at": 0,
        "created_at": 0, "wall_time_s": 1.0, "n_records": len(step_right),
        "agent_accuracy": 1.0, "step_accuracy": sum(step_right) / len(step_right),
        "llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "figures": {},
        "verdict": "first", "accepted": True, "records": records(step_right), "id": 1,
    }  # fmt: skip
    values.update(changes)
    return BenchEntry(**values)


def test_the_gate_fails_only_beyond_noise_and_names_the_records() -> None:
    baseline = entry([True] * 10 + [False] * 2)
    same = compare(records([True] * 10 + [False] * 2), baseline, alpha=0.05, metrics=["step"])
    assert same.verdict is BenchVerdict.PASS and same.common == 12

    one_worse = [False] + [True] * 9 + [False] * 2
    noise = compare(records(one_worse), baseline, alpha=0.05, metrics=["agent", "step"])
    assert noise.verdict is BenchVerdict.PASS
    assert noise.metrics[1].worse == ["r0"] and not noise.metrics[1].regressed

    six_worse = [False] * 6 + [True] * 4 + [False] * 2
    worse = compare(records(six_worse), baseline, alpha=0.05, metrics=["agent", "step"])
    assert worse.verdict is BenchVerdict.REGRESSION
    step = worse.metrics[1]
    assert step.worse == [f"r{i}" for i in range(6)] and step.better == []
    assert step.p_worse == pytest.approx(1 / 64) and step.threshold == 0.025
    assert step.before == pytest.approx(10 / 12) and step.after == pytest.approx(4 / 12)

    better = compare(
        records([True] * 12), entry([True] * 4 + [False] * 8), alpha=0.05, metrics=["step"]
    )
    assert better.verdict is BenchVerdict.IMPROVED

    first = compare(records(six_worse), None, alpha=0.05, metrics=["step"])
    assert first.verdict is BenchVerdict.FIRST and first.as_json() is None


def test_the_gate_compares_only_the_records_both_nights_scored() -> None:
    baseline = entry([True] * 12)
    now = records([False] * 12)
    for record in now[:8]:  # relabelled records are other records
        record["fingerprint"] = "relabelled"
    now.append({**now[0], "id": "extra", "fingerprint": "x"})
    gate = compare(now, baseline, alpha=0.05, metrics=["step"])
    assert (gate.common, gate.new, gate.gone) == (4, 9, 8)
    assert gate.verdict is BenchVerdict.PASS  # 4 worse of 4: p = 1/16, not beyond 0.05
    assert gate.metrics[0].worse == ["r10", "r11", "r8", "r9"]


def test_describe_says_what_changed_on_which_record() -> None:
    baseline = entry([True] * 12, id=7, run_id="night-1", code_version="v1")
    now = records([False] * 6 + [True] * 6)
    gate = compare(now, baseline, alpha=0.05, metrics=["step"])
    stored = entry(
        [False] * 6 + [True] * 6, run_id="night-2", verdict=gate.verdict.value, gate=gate.as_json()
    )
    lines = describe(stored, baseline)
    assert lines[0].startswith("REGRESSION: d/a/s (attributor a) against #7 (run night-1, code v1)")
    assert "step: 100.0 % -> 50.0 % (6 records worse, 0 better; p = 0.0156" in lines[1]
    assert lines[2].startswith("    worse on: r0 (gold A@1: was A@1, now A@2), r1 (gold")
    unchanged = entry(
        [True] * 12,
        verdict="pass",
        gate=compare(records([True] * 12), baseline, alpha=0.05, metrics=["step"]).as_json(),
    )
    assert describe(unchanged, baseline) == []


# --- in-sample entries ------------------------------------------------------------------


def test_learned_on_the_data_it_was_trained_on_is_marked_in_sample() -> None:
    suite = load_suite(DEFAULT_SUITE)
    marked = {e.key for e in suite.entries() if in_sample(e.definition())}
    assert marked == {
        f"{dataset}/learned/with-ground-truth"
        for dataset in ("ww-algorithm-generated", "ww-hand-crafted", "injected-corpus")
    }
    # Held-out data, and attributors that learn nothing, are not.
    assert "heldout-shop/learned/with-ground-truth" not in marked
    assert not any("first_error" in key for key in marked)


def test_in_sample_entries_say_so_in_the_table_and_the_report() -> None:
    from faultfinder.evaluation.nightly.command import _table
    from faultfinder.evaluation.nightly.report import render_nightly_report
    from faultfinder.server.store import BenchRun

    figure = {"value": 0.5, "lo": 0.4, "hi": 0.6}
    figures = {"overall": {"agent": figure, "step": figure}}
    definition = {"dataset": {"name": "d"}, "attributor": {"name": "a", "trained_on": ["d"]}}
    trained = entry([True, False], entry="d/a/s", figures=figures, definition=definition)
    held_out = entry([True], entry="h/a/s", figures=figures,
                     definition={**definition, "dataset": {"name": "h"}})  # fmt: skip
    table = _table([trained, held_out])
    assert table[1].startswith("d/a/s (in-sample)") and table[2].startswith("h/a/s ")
    assert "in-sample" not in table[2]
    run = BenchRun(id="night-1", suite="default", digest="x", code_version="v1", plan=[],
                   started_at=0, finished_at=None)  # fmt: skip
    page = render_nightly_report(run, [trained, held_out], {}, [])
    assert page.count("(in-sample)") == 1 and "not held-out accuracy" in page


def test_trained_on_must_name_the_suites_datasets(tmp_path: Path) -> None:
    path = tmp_path / "suite.toml"
    path.write_text(
        'name = "s"\n[[datasets]]\nname = "a"\nspec = "who_and_when:hand-crafted"\n'
        '[[attributors]]\nname = "learned"\ntrained_on = ["b"]\n'
    )
    with pytest.raises(SuiteError, match="names datasets \\['b'\\]"):
        load_suite(path)
