"""τ-bench conversations as the sidecar receives them live: the people's labels carried
over to the runs replayed through an agent framework into a sidecar
(data/corpus/programs/`openai_agents_chat_replay.py`, `pydantic_ai_chat_replay.py`),
and the exported runs given back their record's id and half.

The replay says, for each record, which recorded steps each model call stood for and
which recorded steps were the customer's later turns. In the sidecar's trajectory of the
run, the model calls are its `llm` steps in order and the customer's later turns its
`user` (human) steps in order, so a label moves to:
- a customer turn: the user step that turn became;
- an assistant message or a tool call: the `llm` step of the model call that said it (the
  decision, not the tool's execution that followed), under the name the framework gives
  the run's one agent (`assistant` as the SDKs and the replay's LangGraph
  `create_react_agent` name it).

A label on the customer's first turn (the run's task, no step of a live run) or one whose
step the sidecar's trajectory does not show is reported and left out, never guessed.

    python -m faultfinder.datasets.tau_bench_live label RECORDS REPLAYED \
        --sidecar http://127.0.0.1:4318
    python -m faultfinder.datasets.tau_bench_live name EXPORTED RECORDS --out F \
        [--suffix live]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from faultfinder.datasets.tau_bench import write_lines

__all__ = ["live_steps", "name_exported"]

_WAIT_S = 60.0


def live_steps(replayed: Mapping[str, Any], steps: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    """Recorded step → the live trajectory's step, for every recorded step the replay says
    a model call or a customer turn stood for and the live trajectory shows."""
    moved: dict[int, int] = {}
    calls = [step["index"] for step in steps if step["kind"] == "llm"]
    users = [step["index"] for step in steps if step["kind"] == "human"]
    for live, recorded in zip(calls, replayed["calls"], strict=False):
        for step in recorded:
            moved[int(step)] = int(live)
    for live, recorded in zip(users, replayed["users"], strict=False):
        moved[int(recorded)] = int(live)
    return moved


def _run(client: httpx.Client, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + _WAIT_S
    while True:
        response = client.get(f"/api/runs/{run_id}")
        if response.status_code == 200 and response.json()["status"] != "open":
            run: dict[str, Any] = response.json()
            return run
        if time.monotonic() > deadline:
            raise SystemExit(f"run {run_id} was not assembled within {_WAIT_S:.0f} s")
        time.sleep(0.5)


def label(records_path: Path, replayed_path: Path, sidecar: str) -> int:
    """Post each record's label to its replayed run; returns how many were posted."""
    records = {r["id"]: r for r in _lines(records_path)}
    replays = _lines(replayed_path)
    posted = 0
    with httpx.Client(base_url=sidecar, timeout=30) as client:
        for number, replayed in enumerate(replays, start=1):
            print(f"labelling {number}/{len(replays)}", file=sys.stderr, flush=True)
            record = records[replayed["id"]]
            if len(replayed["trace_ids"]) != 1:
                raise SystemExit(
                    f"{record['id']}: replayed as {len(replayed['trace_ids'])} traces, not one "
                    "run (the replay must group a conversation under one root span)"
                )
            (run_id,) = replayed["trace_ids"]
            run = _run(client, run_id)
            steps = run["trajectory"]["steps"]
            gold = record["label"]
            step = live_steps(replayed, steps).get(int(gold["step"]))
            if step is None:
                where = "the task" if gold["step"] == replayed["task"] else "no live step"
                print(f"left out {record['id']}: label step {gold['step']} is {where}")
                continue
            agent = steps[step]["agent"]
            if (agent == "user") != (gold["agent"] == "user"):
                raise SystemExit(
                    f"{record['id']}: label agent {gold['agent']!r}, live step {step} is {agent!r}"
                )
            body = {
                # The assistant is whatever the framework calls the run's one agent.
                "agent": agent,
                "step": step,
                "mode": gold.get("mode"),
                "reason": gold.get("reason"),
                "source": "human",
                "details": {"record": record["id"], "subset": record["subset"]},
            }
            client.post(f"/api/runs/{run_id}/labels", json=body).raise_for_status()
            posted += 1
    return posted


def name_exported(
    exported: Sequence[Mapping[str, Any]],
    records: Sequence[Mapping[str, Any]],
    *,
    suffix: str = "live",
) -> list[dict[str, Any]]:
    """The exported runs with their record's id (`…/<suffix>`), dataset, subset (the half)
    and framework, so that they split and read as the recorded ones do."""
    by_id = {record["id"]: record for record in records}
    named: list[dict[str, Any]] = []
    for line in exported:
        details = line.get("details") or line.get("label", {}).get("details") or {}
        record = by_id[details["record"]]
        named.append(
            {
                **line,
                "id": f"{record['id']}/{suffix}",
                "dataset": record.get("dataset"),
                "subset": record["subset"],
                "framework": record.get("framework"),
            }
        )
    return sorted(named, key=lambda line: str(line["id"]))


def _lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    labelling = commands.add_parser("label", help="post the labels to the replayed runs")
    labelling.add_argument("records", type=Path)
    labelling.add_argument("replayed", type=Path)
    labelling.add_argument("--sidecar", required=True, help="the sidecar's base URL")
    naming = commands.add_parser("name", help="give exported runs their record's id and half")
    naming.add_argument("exported", type=Path)
    naming.add_argument("records", type=Path)
    naming.add_argument("--out", type=Path, required=True)
    naming.add_argument("--suffix", default="live", help="appended to each record's id")
    args = parser.parse_args(argv)
    if args.command == "label":
        posted = label(args.records, args.replayed, args.sidecar)
        print(f"{posted} labels posted", file=sys.stderr)
        return
    named = name_exported(_lines(args.exported), _lines(args.records), suffix=args.suffix)
    write_lines(named, args.out)
    print(f"{len(named)} live records → {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
