"""The harness's files: the task file it reads, and the JSON Lines it appends one
finished piece of work at a time (so a killed run loses at most the line it was writing)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Task", "append_line", "read_lines", "read_tasks"]


@dataclass(frozen=True)
class Task:
    id: str
    task: str
    answer: str


def read_tasks(path: Path) -> list[Task]:
    """A task file: JSON Lines of `{"id", "task", "answer"}` (other fields ignored)."""
    tasks: list[Task] = []
    seen: set[str] = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: invalid JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}:{number}: must hold a JSON object")
        fields = {}
        for key in ("id", "task", "answer"):
            value = data.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                value = str(value)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{path}:{number}: field {key!r} must be a non-empty string")
            fields[key] = value
        if fields["id"] in seen:
            raise ValueError(f"{path}:{number}: task id {fields['id']!r} appears twice")
        seen.add(fields["id"])
        tasks.append(Task(**fields))
    return tasks


def append_line(path: Path, item: Mapping[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(item, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a kill; its work is redone
    return out
