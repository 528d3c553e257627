"""The shipped Grafana dashboard only queries metrics (and labels) the sidecar exposes."""

from __future__ import annotations

import json
import re
from importlib.resources import files
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from faultfinder.attributors.model import Attribution
from faultfinder.server.ingest import SpanWriter
from faultfinder.server.metrics import DatabaseSnapshot, ServerMetrics
from faultfinder.server.store import BenchEntry

DASHBOARD = files("faultfinder.dashboards") / "grafana" / "faultfinder.json"
METRIC_NAME = re.compile(r"\bfaultfinder_[a-zA-Z0-9_]+")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gauge": ("",),
}


def nightly_entry() -> BenchEntry:
    """One nightly benchmark entry, as `faultfinder bench nightly` stores it."""
    figure = {"value": 0.5, "hits": 6, "n": 12, "lo": 0.25, "hi": 0.75}
    return BenchEntry(
        run_id="night", entry="ww/learned/default", dataset="ww", attributor="learned",
        settings="default", method="learned", code_version="v1", model=None, started_at=0,
        created_at=10**18, wall_time_s=1.0, n_records=12, agent_accuracy=0.5,
        step_accuracy=0.5, llm_calls=0, prompt_tokens=0, completion_tokens=0,
        figures={"overall": {"agent": figure, "step": figure}}, verdict="regression",
        accepted=False,
    )  # fmt: skip


async def _never_called(spans: Any) -> int:
    raise AssertionError("the writer is not started in this test")


def exposed() -> dict[str, set[str]]:
    """Sample name → label names, from the exposition of a registry that has seen one of
    everything (spans in and rejected, database counts and blame, an LLM attribution)."""
    metrics = ServerMetrics()
    writer = SpanWriter(_never_called, max_queued_spans=10, max_batch_spans=10, ack_timeout=1)
    writer.counters.spans_received = 5
    writer.counters.reject_spans("invalid_span", 1)
    writer.counters.reject_request("undecodable")
    metrics.attach(writer, queue_capacity=10)
    metrics.live.snapshot = DatabaseSnapshot(
        up=True, runs={"failed": 1}, jobs={("all_at_once", "done"): 1}, bench=[nightly_entry()]
    )
    metrics.live.blame.counts = {("Coder", "all_at_once", "A.1"): 1}  # read from the database
    metrics.observe_attribution(
        Attribution(
            method="all_at_once",
            agent="Coder",
            step=2,
            llm_calls=2,
            prompt_tokens=900,
            completion_tokens=40,
            latency_s=3.5,
            model="local",
            details={"retried_errors": ["HTTP 500"]},
        )
    )
    families = text_string_to_metric_families(metrics.exposition().decode())
    names: dict[str, set[str]] = {}
    for family in families:
        for suffix in SUFFIXES.get(family.type, ("",)):
            names.setdefault(family.name + suffix, set())
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def queries(dashboard: dict[str, Any]) -> list[str]:
    found = [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if target.get("expr")
    ]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            found.append(query["query"])
    return found


def test_every_metric_the_dashboard_queries_is_exposed(dashboard: dict[str, Any]) -> None:
    names = exposed()
    referenced = {name for expr in queries(dashboard) for name in METRIC_NAME.findall(expr)}
    assert len(referenced) >= 10, "the dashboard covers ingest, runs, jobs, latency, cost, blame"
    missing = sorted(referenced - names.keys())
    assert missing == [], f"the dashboard queries metrics the sidecar does not expose: {missing}"


def test_every_label_the_dashboard_groups_by_exists_on_its_metrics(
    dashboard: dict[str, Any],
) -> None:
    names = exposed()
    for expr in queries(dashboard):
        available = set().union(*(names.get(n, set()) for n in METRIC_NAME.findall(expr)))
        for group in GROUPING.findall(expr):
            for label in filter(None, (part.strip() for part in group.split(","))):
                assert label in available, f"{label!r} is not a label of the metrics in {expr}"


def test_the_dashboard_is_importable_grafana_json(dashboard: dict[str, Any]) -> None:
    panels = dashboard["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 30
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            uid = target["datasource"]["uid"]
            assert uid.strip("${}") in variables, f"{panel['title']}: unknown datasource {uid}"
            for used in re.findall(r"\$(\w+)", target["expr"]):
                assert used in variables or used.startswith("__"), (panel["title"], used)
