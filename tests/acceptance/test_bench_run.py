"""`faultfinder bench run` on the real Who&When data: the random baseline lands on its
analytical value, first_error scores every record and writes its files, bad options
fail cleanly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.attributors.base import AttributeOptions
from faultfinder.attributors.model import Attribution, Trajectory, normalise_agent
from faultfinder.cli import main
from faultfinder.datasets import (
    BenchmarkRecord,
)
from faultfinder.evaluation.run import BenchmarkSettings, run_benchmark

SUBSETS = ("algorithm-generated", "hand-crafted")


@pytest.fixture(scope="module")
def records(who_and_when: list[BenchmarkRecord]) -> list[BenchmarkRecord]:
    return who_and_when


# The Who&When paper's random baseline (agent, step), as fractions.
PUBLISHED_RANDOM = {
    "algorithm-generated": {"agent": 0.291, "step": 0.120},
    "hand-crafted": {"agent": 0.191, "step": 0.042},
}


def bench(datasets_dir: Path, out: Path, *args: str) -> dict[str, object]:
    result = CliRunner().invoke(
        main,
        ["bench", "run", "--dataset", "who_and_when", "--datasets-dir", str(datasets_dir),
         "--out", str(out), "--json", *args],
    )  # fmt: skip
    assert result.exit_code == 0, result.output + (result.stderr or "")
    summary: dict[str, object] = json.loads(result.stdout)  # stdout holds only the JSON
    return summary


def test_random_matches_its_analytical_accuracy_per_subset(
    datasets_dir: Path, records: list[BenchmarkRecord], tmp_path: Path
) -> None:
    repeats = 20
    summary = bench(datasets_dir, tmp_path, "--attributor", "random", "--repeats", str(repeats))
    subsets = summary["subsets"]
    assert isinstance(subsets, dict)

    for subset in SUBSETS:
        members = [r for r in records if r.subset == subset]
        # P(right) per record for a uniform draw over the system's agents and the steps.
        p_agent = [
            (normalise_agent(r.gold.agent) in {normalise_agent(a) for a in r.trajectory.roster})
            / len(r.trajectory.roster)
            for r in members
        ]
        p_step = [1 / len(r.trajectory) for r in members]
        measured = subsets[subset]["accuracy"]
        for name, probabilities in (("agent", p_agent), ("step", p_step)):
            expected = sum(probabilities) / len(probabilities)
            # Standard error of the mean of repeats × records independent Bernoulli draws.
            se = math.sqrt(sum(p * (1 - p) for p in probabilities) / repeats) / len(members)
            mean = measured[name]["mean"]
            assert abs(mean - expected) < 4 * se, (subset, name, mean, expected, se)
            # ...and that analytical value is the paper's random row, within a few points.
            assert abs(expected - PUBLISHED_RANDOM[subset][name]) < 0.02, (subset, name, expected)
            assert subsets[subset]["random_expected"][name] == pytest.approx(expected)
            values = measured[name]["values"]
            assert len(values) == repeats and len(set(values)) > 1  # seeds really differ
            assert measured[name]["min"] <= mean <= measured[name]["max"]

    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == repeats * len(records)
    assert {json.loads(line)["seed"] for line in lines} == set(range(repeats))


def test_first_error_scores_all_184_records_and_writes_its_files(
    datasets_dir: Path, records: list[BenchmarkRecord], tmp_path: Path
) -> None:
    summary = bench(datasets_dir, tmp_path, "--attributor", "first_error")
    subsets = summary["subsets"]
    assert isinstance(subsets, dict)
    assert subsets["overall"]["n"] == 184
    assert (subsets["algorithm-generated"]["n"], subsets["hand-crafted"]["n"]) == (126, 58)
    assert subsets["overall"]["cost"]["mean_llm_calls"] == 0

    for subset in SUBSETS:
        accuracy = subsets[subset]["accuracy"]
        expected = subsets[subset]["random_expected"]
        # A rule that reads the errors in the log should beat blind guessing.
        assert accuracy["agent"]["mean"] > expected["agent"]
        assert accuracy["step"]["mean"] > expected["step"]
        assert accuracy["step"]["mean"] <= accuracy["step_pm1"]["mean"]
        assert accuracy["step_pm3"]["mean"] <= accuracy["step_pm5"]["mean"]

    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert sorted(line["record_id"] for line in lines) == sorted(r.record_id for r in records)
    gold = {r.record_id: r.gold for r in records}
    for line in lines:
        assert line["gold"]["step"] == gold[line["record_id"]].step
        attribution = Attribution.model_validate(line["attribution"])
        assert line["score"]["step"] == (attribution.step == line["gold"]["step"])

    assert json.loads((tmp_path / "summary.json").read_text())["subsets"] == subsets
    report = (tmp_path / "report.md").read_text()
    assert "## Hand-Crafted (n = 58)" in report
    assert "| all-at-once (published) | without | 51.1 | 13.5 |" in report
    hand_crafted = report.split("## Hand-Crafted", 1)[1].split("\n## ", 1)[0]
    ours = next(row for row in hand_crafted.splitlines() if "**first_error (ours)**" in row)
    hc = subsets["hand-crafted"]["accuracy"]
    assert f"| {100 * hc['agent']['mean']:.1f} | {100 * hc['step']['mean']:.1f} |" in ours


def test_limit_and_ground_truth_setting_reach_the_summary(
    datasets_dir: Path, tmp_path: Path
) -> None:
    summary = bench(
        datasets_dir, tmp_path, "--attributor", "first_error", "--limit", "3",
        "--without-ground-truth",
    )  # fmt: skip
    subsets = summary["subsets"]
    assert isinstance(subsets, dict) and isinstance(summary["settings"], dict)
    assert [subsets[s]["n"] for s in (*SUBSETS, "overall")] == [3, 3, 6]
    assert summary["settings"]["use_ground_truth"] is False


@pytest.mark.parametrize(
    ("option", "value"), [("--attributor", "oracle"), ("--dataset", "who_and_how")]
)
def test_unknown_names_are_clean_option_errors(
    datasets_dir: Path, tmp_path: Path, option: str, value: str
) -> None:
    args = {"--dataset": "who_and_when", "--attributor": "random", option: value}
    result = CliRunner().invoke(
        main, ["bench", "run", "--out", str(tmp_path), *[x for kv in args.items() for x in kv]]
    )
    assert result.exit_code == 2
    assert option in result.output and value in result.output
    assert "Traceback" not in result.output


class _Spy:
    """An attributor that records what it was shown and fails on one record."""

    name = "spy"

    def __init__(self, explode_on: str) -> None:
        self.explode_on = explode_on
        self.seen_ground_truth: list[str | None] = []

    async def attribute(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
        self.seen_ground_truth.append(trajectory.ground_truth)
        if trajectory.run_id == self.explode_on:
            raise RuntimeError("model endpoint unreachable")
        last = trajectory.steps[-1]
        return Attribution(method=self.name, agent=last.agent, step=last.index)


async def test_run_benchmark_withholds_ground_truth_and_survives_a_crashing_record(
    records: list[BenchmarkRecord], tmp_path: Path
) -> None:
    sample = records[:4]
    spy = _Spy(explode_on=sample[1].trajectory.run_id)
    settings = BenchmarkSettings("who_and_when", "spy", use_ground_truth=False, concurrency=2)
    summary = await run_benchmark(sample, spy, settings, out_dir=tmp_path)

    assert spy.seen_ground_truth == [None] * 4
    assert all(r.trajectory.ground_truth for r in sample)  # the records themselves are intact
    overall = summary["subsets"]["overall"]
    assert overall["n"] == 4 and overall["failed"]["mean"] == 1
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    crashed = next(line for line in lines if line["record_id"] == sample[1].record_id)
    assert crashed["attribution"]["status"] == "failed"
    assert "model endpoint unreachable" in crashed["attribution"]["failure_reason"]
    assert crashed["score"]["agent"] is False
