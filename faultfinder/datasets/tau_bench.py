"""τ-bench result files → the generic labelled-trajectory format, with people's labels.

τ-bench (github.com/sierra-research/tau-bench, MIT) runs a tool-using customer-service
agent against a simulated customer and writes each run as
`{"task_id", "trial", "reward", "info": {"task": {"instruction", "actions", "outputs"}},
"traj": [chat messages]}`. A failed run (reward below 1) carries no label of who failed
or when; the labels come from a separate file of annotations, one JSON object a line:
`{"id", "step", "agent", "mode", "confidence", "reason"}`, where `step` indexes the steps
this module makes. `packets` writes the runs out for annotators in that numbering
(`data/conversations/RUBRIC.md` says how to label).

Each chat message is one step, except that an assistant message with several tool calls
becomes one step per call: the system prompt (`system`), the customer's turns (`user`,
blameable: the customer is simulated and part of the system under test), the assistant's
turns and calls (`agent` "assistant") and each tool's reply (`tool`).

    python -m faultfinder.datasets.tau_bench RESULTS.json --labels L.jsonl \
        --framework tau-bench-airline --out F.jsonl
    python -m faultfinder.datasets.tau_bench RESULTS.json --packets DIR
    python -m faultfinder.datasets.tau_bench RESULTS.json --instructions F.jsonl \
        --out G.jsonl
    python -m faultfinder.datasets.tau_bench --folded F.jsonl --out G.jsonl
    python -m faultfinder.datasets.tau_bench --who-and-when F.jsonl --out DIR
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from faultfinder.datasets.generic import GENERIC_FORMAT
from faultfinder.datasets.records import DatasetError

__all__ = [
    "AGENT",
    "convert",
    "failed_runs",
    "folded",
    "packets",
    "run_id",
    "steps_of",
    "who_and_when_layout",
    "with_instruction",
    "write_lines",
]

AGENT = "assistant"
"""The one agent of a τ-bench run."""
_PACKETS = 8
_TOOL_TEXT_SHOWN = 2500
"""Characters of a tool reply shown to annotators (the steps keep it whole)."""


def run_id(run: Mapping[str, Any], domain: str) -> str:
    return f"tau-{domain}-{run['task_id']}-t{run.get('trial', 0)}"


def failed_runs(results: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """The runs of a results file that did not reach the goal, in file order."""
    for run in results:
        if float(run.get("reward", 0.0)) < 1.0:
            yield run


def steps_of(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A run's chat messages as generic steps (see the module)."""
    steps: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        content = message.get("content") or ""
        if role == "system":
            steps.append({"role": "system", "content": content})
        elif role == "user":
            steps.append({"role": "user", "agent": "user", "content": content})
        elif role == "tool":
            name = message.get("name") or "tool"
            steps.append({"role": "tool", "agent": name, "tool_name": name, "content": content})
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            if not calls:
                steps.append({"role": "agent", "agent": AGENT, "content": content})
            for call in calls:
                function = call.get("function") or {}
                name = str(function.get("name", ""))
                arguments = str(function.get("arguments", ""))
                steps.append(
                    {
                        "role": "agent",
                        "agent": AGENT,
                        "content": f"{content} {name}({arguments})".strip(),
                        "tool_name": name,
                        "tool_arguments": arguments,
                    }
                )
        else:
            raise DatasetError(f"unknown chat role {role!r}")
    return steps


def convert(
    results: Sequence[Mapping[str, Any]],
    labels: Mapping[str, Mapping[str, Any]],
    *,
    domain: str,
    framework: str,
) -> list[dict[str, Any]]:
    """The labelled failed runs as generic records; a failed run without a label is left out.

    The subset says whether the τ-bench task id is even or odd, so that one half can be
    trained on and the other scored with no task in both.
    """
    records: list[dict[str, Any]] = []
    for run in failed_runs(results):
        rid = run_id(run, domain)
        label = labels.get(rid)
        if label is None:
            continue
        steps = steps_of(run["traj"])
        step = int(label["step"])
        if not 0 <= step < len(steps) or steps[step]["role"] not in ("agent", "user"):
            raise DatasetError(f"{rid}: label step {step} is not an agent's or the user's turn")
        task_id = int(run["task_id"])
        records.append(
            {
                "format": GENERIC_FORMAT,
                "id": rid,
                "dataset": "tau-bench",
                "subset": f"{framework}/{'even' if task_id % 2 == 0 else 'odd'}-tasks",
                "framework": framework,
                "task": next((s["content"] for s in steps if s["role"] == "user"), ""),
                "simulated_user": True,
                "user_instruction": _instruction(run),
                "roster": [AGENT, "user"],
                "steps": steps,
                "label": {
                    "agent": label["agent"],
                    "step": step,
                    "mode": label.get("mode"),
                    "reason": label.get("reason"),
                    "source": "human",
                },
                "metadata": {
                    "tau_task_id": task_id,
                    "trial": run.get("trial", 0),
                    "label_confidence": label.get("confidence"),
                },
            }
        )
    return records


def _instruction(run: Mapping[str, Any]) -> str | None:
    """The simulated customer's hidden instruction (what it was told to want and know)."""
    task = (run.get("info") or {}).get("task") or {}
    instruction = task.get("instruction")
    return instruction if isinstance(instruction, str) and instruction.strip() else None


def with_instruction(
    record: Mapping[str, Any], instructions: Mapping[str, str | None]
) -> dict[str, Any]:
    """`record` with its run's simulated-user instruction (`instructions` by run id)."""
    details = record.get("details") or {}
    rid = str(details.get("record") or record["id"])
    instruction = instructions.get(rid)
    if instruction is None:
        raise DatasetError(f"{record['id']}: no τ-bench run {rid!r} with an instruction")
    return {**record, "user_instruction": instruction}


def folded(record: Mapping[str, Any]) -> dict[str, Any]:
    """`record` in another layout another writer may use: no system step, and each tool's
    reply folded into its call's step (`tool_result`) instead of a step of its own. The
    label moves with its step (a label is never on a system step or a tool's reply)."""
    steps: list[dict[str, Any]] = []
    moved: dict[int, int] = {}
    for index, step in enumerate(record["steps"]):
        if step["role"] == "system":
            continue
        if step["role"] == "tool":
            waiting = (
                call
                for call in steps
                if call["role"] == "agent"
                and call.get("tool_name") == step.get("tool_name")
                and "tool_result" not in call
            )
            call = next(waiting, None)
            if call is not None:
                call["tool_result"] = step["content"]
                continue
        moved[index] = len(steps)
        steps.append(dict(step))
    label = dict(record["label"], step=moved[record["label"]["step"]])
    return {**record, "id": f"{record['id']}/folded", "steps": steps, "label": label}


def who_and_when_layout(record: Mapping[str, Any]) -> dict[str, Any]:
    """`record` as a Who&When-format file (Hand-Crafted style), as a writer with only that
    format may hand it over: a `history` of `{role, content}` entries, one per step, the
    speaker in `role` (`system`, `user`, `assistant`, `tool`), a call's name and arguments
    only in its text, no tool names; `mistake_agent` / `mistake_step` from the label and a
    top-level `"simulated_user": true`. Steps keep their numbers, so the label does too."""
    history = [
        {
            "role": {"agent": str(step.get("agent", AGENT))}.get(step["role"], step["role"]),
            "content": str(step.get("content") or ""),
        }
        for step in record["steps"]
    ]
    label = record["label"]
    return {
        "question": record.get("task", ""),
        "question_ID": record["id"],
        "framework": record.get("framework"),
        "simulated_user": True,
        **(
            {"user_instruction": record["user_instruction"]}
            if record.get("user_instruction")
            else {}
        ),
        "history": history,
        "mistake_agent": label["agent"],
        "mistake_step": str(label["step"]),
        "mistake_reason": label.get("reason") or "",
    }


def packets(results: Sequence[Mapping[str, Any]], domain: str, out: Path) -> list[Path]:
    """Write the failed runs for annotators, numbered as `steps_of` numbers them."""
    runs = list(failed_runs(results))
    if not runs:
        return []
    policy = runs[0]["traj"][0].get("content", "")
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for number in range(_PACKETS):
        chosen = runs[number::_PACKETS]
        if not chosen:
            continue
        parts = [f"# The agent's policy (the system prompt, step 0 of every run)\n\n{policy}\n"]
        for run in chosen:
            task = run["info"]["task"]
            parts.append(f"\n\n{'=' * 54}\n# Run {run_id(run, domain)}\n")
            parts.append(f"## The simulated user's hidden instruction\n{task['instruction']}\n")
            parts.append(
                "## Gold actions (one valid sequence of database-changing actions that "
                f"reaches the goal)\n{json.dumps(task['actions'], indent=1)}\n"
            )
            if task.get("outputs"):
                parts.append(f"## Outputs the agent had to tell the user\n{task['outputs']}\n")
            parts.append("## The run (failed: the final database state or outputs did not match)")
            for index, step in enumerate(steps_of(run["traj"])):
                parts.append(f"\n[step {index}] {_shown_role(step)}:\n{_shown_text(step)}")
        path = out / f"packet{number}.md"
        path.write_text("\n".join(parts) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def _shown_role(step: Mapping[str, Any]) -> str:
    if step["role"] == "tool":
        return f"tool result ({step['tool_name']})"
    if step["role"] == "agent":
        return "assistant tool call" if step.get("tool_name") else "assistant"
    return str(step["role"])


def _shown_text(step: Mapping[str, Any]) -> str:
    if step["role"] == "system":
        return "[the policy, given once at the top of this file]"
    text = str(step["content"])
    if step["role"] == "tool" and len(text) > _TOOL_TEXT_SHOWN:
        return text[:_TOOL_TEXT_SHOWN] + " …[cut]"
    return text


def _read_labels(path: Path) -> dict[str, dict[str, Any]]:
    labels: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            label = json.loads(line)
            labels[str(label["id"])] = label
    return labels


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="?", help="a τ-bench results JSON file")
    parser.add_argument("--domain", default="airline")
    parser.add_argument("--labels", type=Path, help="annotations, one JSON object a line")
    parser.add_argument("--framework", default="tau-bench-airline")
    parser.add_argument("--out", type=Path, help="the generic JSON Lines file to write")
    parser.add_argument("--packets", type=Path, help="write annotation packets to this folder")
    parser.add_argument(
        "--folded",
        type=Path,
        help="write this generic file of τ-bench records in the folded layout to --out",
    )
    parser.add_argument(
        "--instructions",
        type=Path,
        help="add each run's simulated-user instruction from RESULTS to this generic file of "
        "τ-bench records (matched by run id; a record made from a run, such as a live copy, "
        "names it in details.record) and write it to --out",
    )
    parser.add_argument(
        "--who-and-when",
        type=Path,
        help="write this generic file of τ-bench records as a folder of Who&When-format "
        "files (1.json, 2.json, …) to --out",
    )
    args = parser.parse_args(argv)
    if args.who_and_when:
        lines = args.who_and_when.read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
        args.out.mkdir(parents=True, exist_ok=True)
        for number, record in enumerate(records, start=1):
            text = json.dumps(who_and_when_layout(record), ensure_ascii=False, indent=1)
            (args.out / f"{number}.json").write_text(text + "\n", encoding="utf-8")
        print(f"{len(records)} records as Who&When-format files → {args.out}")
        return
    if args.folded:
        lines = args.folded.read_text(encoding="utf-8").splitlines()
        records = [folded(json.loads(line)) for line in lines if line.strip()]
        write_lines(records, args.out)
        print(f"{len(records)} records in the folded layout → {args.out}")
        return
    if args.results is None:
        parser.error("give a τ-bench results file, or --folded FILE --out OUT")
    results = json.loads(args.results.read_text(encoding="utf-8"))
    if args.instructions:
        by_run = {run_id(run, args.domain): _instruction(run) for run in results}
        lines = args.instructions.read_text(encoding="utf-8").splitlines()
        records = [with_instruction(json.loads(line), by_run) for line in lines if line.strip()]
        write_lines(records, args.out)
        print(f"{len(records)} records with the user's instruction → {args.out}")
        return
    if args.packets:
        written = packets(results, args.domain, args.packets)
        print(f"{len(written)} packets in {args.packets}")
    if args.labels and args.out:
        records = convert(
            results, _read_labels(args.labels), domain=args.domain, framework=args.framework
        )
        write_lines(records, args.out)
        print(f"{len(records)} labelled failed runs → {args.out}")


def write_lines(records: Sequence[Mapping[str, Any]], path: Path) -> None:
    """`records` as a JSON Lines file at `path` (compact, UTF-8 kept)."""
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
