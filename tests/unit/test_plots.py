"""report.html of a benchmark run: well-formed, self-contained, and showing the run's numbers."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree
from collections import Counter
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import anyio
import pytest

from faultfinder.attributors.base import get_attributor
from faultfinder.datasets import BenchmarkRecord
from faultfinder.evaluation.run import BenchmarkSettings, run_benchmark, summarise_results
from faultfinder.evaluation.run.plots import render_html_report
from faultfinder.evaluation.run.report import PUBLISHED_ROWS

VOID = {"meta", "link", "br", "hr", "img", "input", "col", "area", "base", "wbr", "source"}


class TagBalance(HTMLParser):
    """Collects problems: closing tags without an opening one, tags never closed."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.problems: list[str] = []
        self.tags: Counter[str] = Counter()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.open[-1:] or 'nothing'}")
        else:
            self.open.pop()


def check_well_formed(html: str) -> Counter[str]:
    assert html.startswith("<!doctype html>")
    parser = TagBalance()
    parser.feed(html)
    parser.close()
    assert parser.problems == [] and parser.open == [], (parser.problems, parser.open)
    # Every chart is well-formed SVG on its own (an XML parser accepts it).
    start = 0
    while (start := html.find("<svg", start)) != -1:
        end = html.index("</svg>", start) + len("</svg>")
        ElementTree.fromstring(html[start:end])
        start = end
    # Self-contained: no scripts, no external files.
    assert parser.tags["script"] == 0
    assert "src=" not in html and "href=" not in html and "@import" not in html
    return parser.tags


@pytest.fixture(scope="module")
def first_error_run(
    tmp_path_factory: pytest.TempPathFactory, who_and_when: list[BenchmarkRecord]
) -> Path:
    """A real `first_error` benchmark run on 12 Who&When records of each subset."""
    records = who_and_when
    chosen = [r for r in records if r.subset == "algorithm-generated"][:12] + [
        r for r in records if r.subset == "hand-crafted"
    ][:12]
    out = tmp_path_factory.mktemp("bench")
    settings = BenchmarkSettings(dataset="who_and_when", attributor="first_error", limit=12)
    anyio.run(lambda: run_benchmark(chosen, get_attributor("first_error"), settings, out_dir=out))
    return out


def test_bench_run_writes_a_report_with_its_accuracy_beside_the_published_rows(
    first_error_run: Path,
) -> None:
    html = (first_error_run / "report.html").read_text(encoding="utf-8")
    tags = check_well_formed(html)
    assert tags["svg"] >= 4  # two subsets, overall, step errors
    summary = json.loads((first_error_run / "summary.json").read_text())
    for name in ("algorithm-generated", "hand-crafted", "overall"):
        accuracy = summary["subsets"][name]["accuracy"]
        ours = (
            f'<td class="num">{100 * accuracy["agent"]["mean"]:.1f}</td>'
            f'<td class="num">{100 * accuracy["step"]["mean"]:.1f}</td>'
        )
        assert ours in html, f"{name}: our accuracy is not in the report"
    for row in PUBLISHED_ROWS:
        if row.agent is not None:
            assert f"{row.agent:.1f}" in html, f"published {row.method} {row.subset} missing"
    assert "Accuracy by tokens spent" not in html  # the heuristic calls no model


def test_the_step_error_histogram_counts_predicted_minus_gold(first_error_run: Path) -> None:
    html = (first_error_run / "report.html").read_text(encoding="utf-8")
    lines = [json.loads(line) for line in (first_error_run / "results.jsonl").open()]
    errors = Counter(
        line["attribution"]["step"] - line["gold"]["step"]
        for line in lines
        if line["attribution"]["status"] == "ok"
    )
    exact, early = errors[0], sum(n for e, n in errors.items() if e < 0)
    assert f"<title>0: {exact}</title>" in html
    assert f"{exact} exactly on the gold step" in html
    assert f"{early} early" in html
    # Far misses are pooled into the outermost bins rather than dropped.
    far_early = sum(n for e, n in errors.items() if e <= -10)
    assert f"<title>≤-10: {far_early}</title>" in html


def _line(number: int, tokens: int, right: bool) -> dict[str, Any]:
    return {
        "record_id": f"algorithm-generated/{number}",
        "subset": "algorithm-generated",
        "seed": 0,
        "gold": {"agent": "Coder", "step": 3},
        "attribution": {"method": "all_at_once", "status": "ok", "agent": "Coder",
                        "step": 3 if right else 5},
        "score": {"agent": right, "step": right, "step_pm1": right, "official_agent": right,
                  "official_step": right, "failed": False},
        "llm_calls": 1,
        "prompt_tokens": tokens - 10,
        "completion_tokens": 10,
        "latency_s": 1.0,
        "random_expected": {"agent": 0.25, "step": 0.1},
    }  # fmt: skip


def test_llm_runs_get_accuracy_by_tokens_and_hostile_names_stay_text() -> None:
    # Eight records: the four cheapest are wrong, the four dearest right.
    lines = [_line(n, 100 * n, right=n > 4) for n in range(1, 9)]
    settings = BenchmarkSettings(dataset="who_and_when", attributor="all_at_once")
    summary = summarise_results(
        lines, settings, wall_time_s=1.0, started_at=datetime.now(UTC), records_selected=8
    )
    summary["attributor"] = "<script>alert(1)</script>"
    html = render_html_report(summary, lines)
    check_well_formed(html)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "Accuracy by tokens spent" in html
    # Quartiles of 2 records: mean tokens 150, 350, 550, 750 with 0, 0, 100, 100 % right.
    for tokens, percent in ((150, "0.0"), (350, "0.0"), (550, "100.0"), (750, "100.0")):
        row = f'<td class="num">2</td><td class="num">{tokens}</td><td class="num">{percent}</td>'
        assert row in html
    assert "2 late" not in html and "4 late" in html  # wrong answers said step 5 for gold 3
