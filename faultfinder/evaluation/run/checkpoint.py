"""The files that make a benchmark run resumable: results.jsonl, one line per attributed
record and repeat, and run.json, the run's identity and its sessions."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "IDENTITY_FIELDS",
    "RESULTS_FILE",
    "RUN_FILE",
    "ResumeMismatch",
    "check_identity",
    "read_results",
    "read_run_file",
    "result_key",
    "write_run_file",
]

RESULTS_FILE = "results.jsonl"
"""One line per attributed record (and repeat), appended as records finish."""
RUN_FILE = "run.json"
"""The run's identity and its sessions (each start or resume), rewritten as records finish."""
IDENTITY_FIELDS = ("dataset", "attributor", "use_ground_truth", "model", "prefilter")
"""Settings that must match for a run directory to be resumed."""


class ResumeMismatch(ValueError):
    """A run directory holds results made with different settings than the ones asked for."""


def result_key(line: Mapping[str, Any]) -> tuple[str, int | None]:
    return str(line["record_id"]), line.get("seed")


def read_results(path: Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """The lines of a results.jsonl file.

    A process killed mid-write leaves a torn last line; it is ignored (and with
    `repair` cut off, so that appended lines start on a line of their own). A bad
    line anywhere else is an error naming the file and line.
    """
    if not path.is_file():
        return []
    raw = path.read_bytes()
    complete = raw if raw.endswith(b"\n") or not raw else raw[: raw.rfind(b"\n") + 1]
    if repair and len(complete) != len(raw):
        with path.open("r+b") as handle:
            handle.truncate(len(complete))
    lines: list[dict[str, Any]] = []
    for number, text in enumerate(complete.decode("utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
            result_key(line)
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: line {number} is not a benchmark result ({exc})") from None
        lines.append(line)
    return lines


def read_run_file(out_dir: Path) -> dict[str, Any] | None:
    path = out_dir / RUN_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResumeMismatch(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("identity"), dict):
        raise ResumeMismatch(f"{path} has no 'identity' object")
    return data


def write_run_file(out_dir: Path, data: Mapping[str, Any]) -> None:
    # Replace atomically: a kill while writing must not leave a half file behind.
    path = out_dir / RUN_FILE
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(scratch, path)


def check_identity(out_dir: Path, recorded: Mapping[str, Any], wanted: Mapping[str, Any]) -> None:
    for name in IDENTITY_FIELDS:
        if recorded.get(name) != wanted.get(name):
            raise ResumeMismatch(
                f"{out_dir} holds results with {name} = {recorded.get(name)!r}, not"
                f" {wanted.get(name)!r}; use another --out directory (or --no-resume to"
                " start that directory over)"
            )
