"""The hostile drills of issue 28 run through `faultfinder bench chaos --hostile`, cut down
(`--quick`: lower limits, smaller bodies): their figures come out as JSON and each says it
held. What each drill checks on the server has its own regression test (ingest limits,
slow senders, a read-only database, CSRF, large runs, hostile names); this one checks
that the drills themselves still run and measure.

The long version is `faultfinder bench chaos --hostile all` (reports/hostile.md).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.sidecar import FAULTFINDER, ROOT


@pytest.mark.slow
def test_the_memory_and_read_only_drills_measure_and_hold(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            str(FAULTFINDER),
            "bench",
            "chaos",
            "--hostile",
            "2,1",
            "--quick",
            "--json",
            "--workdir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    findings: list[dict[str, Any]] = json.loads(done.stdout)
    assert [finding["item"] for finding in findings] == [1, 2]  # in item order
    for finding in findings:
        assert finding["holds"] is True, finding
        assert finding["error"] is None and finding["checks"], finding
    memory, read_only = (finding["figures"] for finding in findings)
    # The 50,000-span body was refused before it cost memory, the flood's run holds what a
    # run may (--quick: 2,000 spans) and the rest of it was refused as partial success.
    (body,) = (figures for probe, figures in memory.items() if probe.endswith("50,000 spans"))
    assert body["status"] == 413 and body["rss_peak_mb"] > 0
    assert memory["flood"]["spans_stored_in_the_run"] == 2_000
    assert memory["flood"]["spans_refused_as_partial_success"] == 3 * 2_000 - 2_000
    # The read-only database refused with 503 and lost nothing; after the restart every
    # span of the retrying sender landed.
    assert read_only["read-only database"]["answers"].get("503", 0) > 0
    sender = read_only["retrying sender"]
    assert sender["spans_lost"] == 0
    assert sender["spans_stored"] == sender["spans_sent"] > 0
    # Progress went to stderr, one line per step of each drill.
    assert "[item 1, sqlite]" in done.stderr and "[item 2, sqlite]" in done.stderr


def _quick(items: str, workdir: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(FAULTFINDER), "bench", "chaos", "--hostile", items, "--quick", "--json",
         "--workdir", str(workdir)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    findings: list[dict[str, Any]] = json.loads(done.stdout)
    return findings


@pytest.mark.slow
def test_the_second_round_drills_measure_and_hold(tmp_path: Path) -> None:
    bodies, storage, holds, sizes = _quick("9,10,11,12", tmp_path)
    for finding in (bodies, storage, holds, sizes):
        failed = [check for check, held in finding["checks"].items() if not held]
        assert finding["holds"] is True, (failed, finding["error"], finding["figures"])
    figures = bodies["figures"]
    twice = next(f for probe, f in figures.items() if "gzipped twice" in probe)
    assert twice["status"] == 400 and twice["rss_tree_peak_mb"] > 0
    assert set(figures["4 senders of each at once"]["statuses"]) <= {400, 413, 503}
    assert figures["canary exporter"]["requests"] > 0
    deep = storage["figures"]
    assert deep["a value 40 kvlists deep"]["status"] == 200
    assert deep["a label nested 300 levels"]["status"] == 400
    if "the WAL index made immutable" in deep:  # needs chattr +i (root)
        assert deep["the WAL index made immutable"]["alive"] is True
    idle = holds["figures"]["one idle connection declaring 16 MiB"]
    assert idle == {"http": {"200": 20}, "grpc": {"OK": 10}}
    stalls = next(f for probe, f in holds["figures"].items() if "stall" in probe)
    assert stalls["others_during"] == {"200": 20}
    large = next(f for probe, f in sizes["figures"].items() if "steps of 1 MiB" in probe)
    assert large["status"] == "attributed" and 0 < large["page"]["bytes"] < 5_000_000
