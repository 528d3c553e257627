"""`faultfinder bench run` with LLM methods: model options reach the endpoint, token costs
reach the summary, the documented fixed subset, and resume refusing foreign results."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from faultfinder.attributors.learned.step_model import default_model
from faultfinder.cli import main
from faultfinder.datasets import (
    BenchmarkRecord,
    DatasetError,
    load_dataset,
)
from faultfinder.evaluation.prefilter import build_fold_models
from faultfinder.evaluation.run import RESULTS_FILE, read_results
from faultfinder.evaluation.subsets import (
    FIXED_SUBSET_SEED,
    SubsetError,
    fixed_subset_ids,
    parse_fraction,
    pick_fraction,
)
from faultfinder.training import ModelConfig, record_folds, task_key
from tests.stub_llm import ScriptedReply, StubLLM, answer

AG = "who_and_when:algorithm-generated"


@pytest.fixture(scope="module")
def ag_records(datasets_dir: Path) -> list[BenchmarkRecord]:
    try:
        return list(load_dataset(AG, datasets_dir))
    except DatasetError as exc:  # pragma: no cover - a broken checkout of the data
        pytest.fail(str(exc))


def replies_for(records: list[BenchmarkRecord], usage: tuple[int, int]) -> list[ScriptedReply]:
    """One all_at_once answer per record (its gold agent, step 0), in dataset order."""
    return [
        answer({"agent": r.gold.agent, "step": 0, "reason": "scripted"}, usage=usage)
        for r in records
    ]


def bench(datasets_dir: Path, out: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(
        main,
        ["bench", "run", "--dataset", AG, "--datasets-dir", str(datasets_dir),
         "--out", str(out), "--json", *args],
        env=env,
    )  # fmt: skip


def summary_of(result: Result) -> dict[str, Any]:
    assert result.exit_code == 0, result.output + (result.stderr or "")
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


# --- model options ---------------------------------------------------------------------


def test_model_options_reach_the_endpoint_and_tokens_reach_the_summary(
    datasets_dir: Path, ag_records: list[BenchmarkRecord], tmp_path: Path
) -> None:
    stub = StubLLM(replies_for(ag_records[:2], usage=(300, 40)))
    with stub.running():
        summary = summary_of(
            bench(
                datasets_dir, tmp_path, "--attributor", "all_at_once", "--limit", "2",
                "--concurrency", "1", "--base-url", stub.base_url, "--model", "judge-model",
                "--max-tokens", "77", "--timeout", "5",
            )
        )  # fmt: skip
    requests = stub.completions
    assert len(requests) == 2
    assert {r["model"] for r in requests} == {"judge-model"}
    assert {r["max_tokens"] for r in requests} == {77}
    overall = summary["subsets"]["overall"]
    assert overall["accuracy"]["agent"]["mean"] == 1.0  # the script named the gold agents
    assert overall["cost"]["total_llm_calls"] == 2
    assert overall["cost"]["total_prompt_tokens"] == 600
    assert overall["cost"]["total_completion_tokens"] == 80
    assert summary["settings"]["model"] == "judge-model"
    assert sum(summary["structured_output"]["replies_by_rung"].values()) == 2
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "total prompt tokens | 600" in report
    assert "Structured output: replies by rung" in report


def test_environment_names_the_endpoint_and_arguments_win(
    datasets_dir: Path, ag_records: list[BenchmarkRecord], tmp_path: Path
) -> None:
    stub = StubLLM(replies_for([ag_records[0], ag_records[0]], usage=(10, 5)))
    with stub.running():
        env = {
            "OPENAI_BASE_URL": stub.base_url,
            "OPENAI_API_KEY": "sk-from-env",
            "FAULTFINDER_LLM_MODEL": "env-model",
            "FAULTFINDER_LLM_MAX_TOKENS": "99",
        }
        first = bench(datasets_dir, tmp_path / "a", "--attributor", "all_at_once",
                      "--limit", "1", env=env)  # fmt: skip
        second = bench(datasets_dir, tmp_path / "b", "--attributor", "all_at_once",
                       "--limit", "1", "--max-tokens", "55", env=env)  # fmt: skip
    summary_of(first)
    summary_of(second)
    assert [(r["model"], r["max_tokens"]) for r in stub.completions] == [
        ("env-model", 99),
        ("env-model", 55),
    ]
    # The key is used but never written to the run's files.
    for out in (tmp_path / "a", tmp_path / "b"):
        for name in ("run.json", "summary.json", RESULTS_FILE):
            assert "sk-from-env" not in (out / name).read_text(encoding="utf-8")


def test_model_options_with_a_heuristic_are_a_usage_error(
    datasets_dir: Path, tmp_path: Path
) -> None:
    result = bench(datasets_dir, tmp_path, "--attributor", "first_error", "--model", "m")
    assert result.exit_code == 2
    assert "LLM methods" in result.output
    assert not (tmp_path / RESULTS_FILE).exists()


def test_local_model_help_advises_concurrency_one() -> None:
    result = CliRunner().invoke(main, ["bench", "run", "--help"])
    assert result.exit_code == 0
    assert "--local-model [qwen1.5b|smollm2]" in result.output
    assert "use 1 with it" in " ".join(result.output.split())


# --- resume refusing foreign results -------------------------------------------------------


@pytest.mark.parametrize(
    ("second_run", "named"),
    [
        (("--attributor", "random"), "attributor"),
        (("--attributor", "first_error", "--without-ground-truth"), "use_ground_truth"),
    ],
)
def test_resuming_with_other_settings_is_a_clean_error_naming_the_setting(
    datasets_dir: Path, tmp_path: Path, second_run: tuple[str, ...], named: str
) -> None:
    summary_of(bench(datasets_dir, tmp_path, "--attributor", "first_error", "--limit", "3"))
    before = (tmp_path / RESULTS_FILE).read_bytes()
    result = bench(datasets_dir, tmp_path, "--limit", "5", *second_run)
    assert result.exit_code == 1
    assert f"{named} =" in result.output
    assert "Traceback" not in result.output
    assert (tmp_path / RESULTS_FILE).read_bytes() == before


def test_no_resume_starts_the_directory_over(datasets_dir: Path, tmp_path: Path) -> None:
    summary_of(bench(datasets_dir, tmp_path, "--attributor", "first_error", "--limit", "3"))
    summary = summary_of(
        bench(datasets_dir, tmp_path, "--attributor", "random", "--limit", "2", "--no-resume")
    )
    assert summary["records_completed"] == 2
    assert {line["attribution"]["method"] for line in read_results(tmp_path / RESULTS_FILE)} == {
        "random"
    }


def test_a_torn_last_line_is_dropped_and_the_record_done_again(
    datasets_dir: Path, tmp_path: Path
) -> None:
    summary_of(bench(datasets_dir, tmp_path, "--attributor", "first_error", "--limit", "4"))
    results = tmp_path / RESULTS_FILE
    text = results.read_text(encoding="utf-8")
    # A kill in the middle of writing the fourth line.
    results.write_text(text[: text.rindex("\n", 0, len(text) - 1) + 40], encoding="utf-8")
    summary = summary_of(bench(datasets_dir, tmp_path, "--attributor", "first_error",
                               "--limit", "4"))  # fmt: skip
    lines = read_results(results)
    assert summary["attributed_this_session"] == 1
    assert len(lines) == 4
    assert len({line["record_id"] for line in lines}) == 4


# --- the documented subset --------------------------------------------------------------------


def test_the_fixed_third_of_algorithm_generated_is_42_documented_records(
    ag_records: list[BenchmarkRecord],
) -> None:
    ids = fixed_subset_ids(ag_records)
    assert len(ag_records) == 126
    assert len(ids) == 42
    # The recipe as documented: sorted ids, shuffled with the seed, the first 42.
    documented = sorted(r.record_id for r in ag_records)
    random.Random(20251129).shuffle(documented)
    assert set(ids) == set(documented[:42])
    assert fixed_subset_ids(list(reversed(ag_records))) == ids  # input order does not matter
    assert set(pick_fraction(ids * 3, parse_fraction("1/3"), FIXED_SUBSET_SEED + 1)) != set(
        pick_fraction(ids, parse_fraction("1/3"))
    )


def test_fraction_and_records_file_select_what_the_run_attributes(
    datasets_dir: Path, ag_records: list[BenchmarkRecord], tmp_path: Path
) -> None:
    summary = summary_of(
        bench(datasets_dir, tmp_path / "third", "--attributor", "first_error", "--fraction", "1/3")
    )
    attributed = {line["record_id"] for line in read_results(tmp_path / "third" / RESULTS_FILE)}
    assert summary["records_completed"] == 42
    assert attributed == set(fixed_subset_ids(ag_records))

    listing = tmp_path / "ids.txt"
    listing.write_text(
        "# two records\nalgorithm-generated/7\n\nalgorithm-generated/9  # second\n",
        encoding="utf-8",
    )
    summary_of(bench(datasets_dir, tmp_path / "listed", "--attributor", "first_error",
                     "--records", str(listing)))  # fmt: skip
    listed = [line["record_id"] for line in read_results(tmp_path / "listed" / RESULTS_FILE)]
    assert sorted(listed) == ["algorithm-generated/7", "algorithm-generated/9"]


def test_unknown_record_ids_and_bad_fractions_are_clean_errors(
    datasets_dir: Path, tmp_path: Path
) -> None:
    listing = tmp_path / "ids.txt"
    listing.write_text("algorithm-generated/1\nalgorithm-generated/999\n", encoding="utf-8")
    result = bench(datasets_dir, tmp_path / "o", "--attributor", "first_error",
                   "--records", str(listing))  # fmt: skip
    assert result.exit_code == 1
    assert "algorithm-generated/999" in result.output
    for text in ("0", "4/3", "a third"):
        with pytest.raises(SubsetError, match="fraction"):
            parse_fraction(text)


# --- the learned pre-filter ---------------------------------------------------------------------


def test_prefilter_hints_come_from_out_of_fold_models_and_resume_keeps_k_apart(
    datasets_dir: Path, ag_records: list[BenchmarkRecord], tmp_path: Path
) -> None:
    # Two records held out by the same fold: one fold model to train keeps the test short.
    everything = list(load_dataset("who_and_when", datasets_dir))
    fold = next(f for f in record_folds(everything, 5, 0) if f)
    chosen = [everything[i] for i in fold if everything[i].subset == ag_records[0].subset][:2]
    listing = tmp_path / "records.txt"
    listing.write_text("".join(f"{r.record_id}\n" for r in chosen), encoding="utf-8")
    out = tmp_path / "out"
    stub = StubLLM(replies_for(chosen, usage=(300, 40)))
    with stub.running():
        summary = summary_of(
            bench(datasets_dir, out, "--attributor", "all_at_once", "--records", str(listing),
                  "--concurrency", "1", "--base-url", stub.base_url, "--prefilter", "3")
        )  # fmt: skip
    assert summary["settings"]["prefilter"] == {
        "top_k": 3, "cv_folds": 5, "cv_seed": 0, "cv_folds_by": "task"
    }  # fmt: skip
    assert len(stub.completions) == 2
    for request in stub.completions:
        prompt = request["messages"][-1]["content"]
        assert "Hint:" in prompt and prompt.index("</log>") < prompt.index("Hint:")
    lines = read_results(out / RESULTS_FILE)
    assert {line["record_id"] for line in lines} == {r.record_id for r in chosen}
    for line in lines:
        recorded = line["attribution"]["details"]["prefilter"]
        assert recorded["model"].startswith("out-of-fold model: fold ")
        assert len(recorded["candidates"]) == 3
    before = (out / RESULTS_FILE).read_bytes()
    for other in (("--prefilter", "2"), ()):
        result = bench(datasets_dir, out, "--attributor", "all_at_once", "--records",
                       str(listing), "--base-url", "http://127.0.0.1:9/v1", *other)  # fmt: skip
        assert result.exit_code == 1, result.output
        assert "prefilter =" in result.output and "Traceback" not in result.output
    assert (out / RESULTS_FILE).read_bytes() == before
    # A directory whose hints came from folds split by record (before folds kept a task's
    # runs together) is not continued with hints from the new folds.
    run_file = out / "run.json"
    recorded = json.loads(run_file.read_text(encoding="utf-8"))
    del recorded["identity"]["prefilter"]["cv_folds_by"]
    run_file.write_text(json.dumps(recorded), encoding="utf-8")
    result = bench(datasets_dir, out, "--attributor", "all_at_once", "--records", str(listing),
                   "--base-url", "http://127.0.0.1:9/v1", "--prefilter", "3")  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "prefilter =" in result.output and "Traceback" not in result.output
    assert (out / RESULTS_FILE).read_bytes() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--attributor", "first_error", "--prefilter", "3"), "--prefilter applies"),
        (("--attributor", "step_by_step", "--prefilter", "3"), "--prefilter applies"),
        (("--attributor", "all_at_once", "--prefilter-cv", "3"), "--prefilter-cv needs"),
    ],
)
def test_prefilter_misuse_is_a_usage_error(
    datasets_dir: Path, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    result = bench(datasets_dir, tmp_path, *args)
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / RESULTS_FILE).exists()


def test_fold_models_never_saw_the_records_they_hint_about(
    datasets_dir: Path, ag_records: list[BenchmarkRecord]
) -> None:
    everything = list(load_dataset("who_and_when", datasets_dir))
    hand_crafted = [r for r in everything if r.subset != ag_records[0].subset]
    needed = [*ag_records[:6], *hand_crafted[:3]]
    folds = build_fold_models(
        everything, needed, folds=5, seed=0, grid=(ModelConfig(kind="linear", l2=10.0),),
        inner_folds=2,
    )  # fmt: skip
    ids = {r.record_id for r in everything}
    used = set()
    for record in needed:
        fold = folds.fold_of[record.trajectory.run_id]
        model = folds(record.trajectory)
        assert model is folds.models[fold]
        assert record.record_id not in folds.trained_on[fold]
        assert str(fold + 1) in str(model.training["prefilter_source"])
        used.add(fold)
    assert len(used) > 1  # the records spread over several folds
    held_out: list[str] = []
    for fold, trained in folds.trained_on.items():
        out = {r.record_id for r in everything if folds.fold_of[r.trajectory.run_id] == fold}
        assert trained == ids - out and len(trained) >= len(ids) * 3 // 4
        held_out += out
    assert len(held_out) == len(set(held_out))  # folds are disjoint
    # Who&When asks some questions in both subsets; a model never hints about a question
    # whose other run it trained on.
    shared = 0
    for record in needed:
        fold = folds.fold_of[record.trajectory.run_id]
        twins = [
            r for r in everything
            if r is not record and task_key(r.trajectory) == task_key(record.trajectory)
        ]  # fmt: skip
        shared += bool(twins)
        assert not {t.record_id for t in twins} & folds.trained_on[fold]
    assert shared  # the check above ran on records whose task is asked twice
    stranger = ag_records[0].trajectory.model_copy(update={"run_id": "elsewhere/1"})
    with pytest.raises(ValueError, match="no out-of-fold pre-filter model"):
        folds(stranger)


def test_prefilter_hints_can_come_from_a_model_file_on_any_dataset(tmp_path: Path) -> None:
    # The packaged model was trained on the injected corpus: an honest LLM run on it takes
    # its hints from a model that never saw it, given as a file.
    corpus = Path(__file__).resolve().parents[2] / "data/corpus/injected/pydantic-ai.jsonl"
    first = json.loads(corpus.read_text(encoding="utf-8").splitlines()[0])
    listing = tmp_path / "records.txt"
    listing.write_text(first["id"] + "\n", encoding="utf-8")
    model = tmp_path / "hints.json"
    default_model().save(model)
    stub = StubLLM([answer({"agent": first["label"]["agent"], "step": 0, "reason": "s"})])
    with stub.running():
        result = CliRunner().invoke(
            main,
            ["bench", "run", "--dataset", str(corpus), "--records", str(listing),
             "--attributor", "all_at_once", "--base-url", stub.base_url, "--concurrency", "1",
             "--prefilter", "2", "--learned-model", str(model), "--out", str(tmp_path / "out"),
             "--json"],
        )  # fmt: skip
    summary = summary_of(result)
    assert summary["settings"]["prefilter"]["model_file"] == str(model)
    (line,) = read_results(tmp_path / "out" / RESULTS_FILE)
    assert line["attribution"]["details"]["prefilter"]["model"] == f"model file {model}"
    assert "Hint:" in stub.completions[0]["messages"][-1]["content"]
    # Without --prefilter a model file means nothing to an LLM method: refused.
    refused = CliRunner().invoke(
        main,
        ["bench", "run", "--dataset", str(corpus), "--attributor", "all_at_once",
         "--base-url", stub.base_url, "--learned-model", str(model)],
    )  # fmt: skip
    assert refused.exit_code == 2 and "--learned-model applies" in refused.output
