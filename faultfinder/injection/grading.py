"""Grading a program's final answer against a task's exact answer, or with a command."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import dataclass

__all__ = ["Grader", "GraderError", "answers_match", "final_line"]

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_TOLERANCE = 1e-6


class GraderError(RuntimeError):
    """The grader command failed to give a verdict."""


def final_line(stdout: str) -> str:
    """A program's final answer: the last non-empty line of its standard output."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _numbers(text: str) -> list[float]:
    out = []
    for token in _NUMBER.findall(text):
        try:
            out.append(float(token.replace(",", "")))
        except ValueError:
            continue
    return out


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+(?:\.[0-9]+)?", text.casefold()))


def answers_match(final: str, answer: str) -> bool:
    """Whether `final` gives `answer`: for a numeric answer, the last number in `final`
    equals it (commas aside, to 1e-6 relative); otherwise `answer`'s words appear in
    `final` as a whole, case and punctuation aside."""
    expected = _numbers(answer)
    if len(expected) == 1 and not re.sub(r"[-\d,.\s%$]", "", answer).strip():
        got = _numbers(final)
        if not got:
            return False
        value, target = got[-1], expected[0]
        return abs(value - target) <= _TOLERANCE * max(1.0, abs(target))
    wanted = _words(answer)
    return bool(wanted) and f" {wanted} " in f" {_words(final)} "


@dataclass(frozen=True)
class Grader:
    """Exact answers from the task file, or a command that reads
    `{"task", "answer", "final_answer"}` as JSON on stdin and exits 0 (correct) or 1 (wrong)."""

    command: str | None = None
    timeout_s: float = 120.0

    def correct(self, task: str, answer: str, final: str) -> bool:
        if self.command is None:
            return answers_match(final, answer)
        payload = json.dumps({"task": task, "answer": answer, "final_answer": final})
        try:
            done = subprocess.run(
                shlex.split(self.command),
                input=payload,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GraderError(f"grader {self.command!r} failed: {exc}") from None
        if done.returncode not in (0, 1):
            raise GraderError(
                f"grader {self.command!r} exited {done.returncode}: {done.stderr.strip()[-500:]}"
            )
        return done.returncode == 0
