"""One run of a user's agent program against a replay-proxy session, graded by the
program's own grader: what `faultfinder verify` does once per corrected step and repeat.

The program reads the task on stdin and prints its final answer as its last line; it
only needs to take `OPENAI_BASE_URL`. Its traces are switched off (`OTEL_SDK_DISABLED`):
a verification replay is a question asked of the program, not a run to attribute.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import dataclass

from faultfinder.injection.grading import Grader, final_line

__all__ = ["ProgramRun", "run_program"]


@dataclass(frozen=True)
class ProgramRun:
    """How one invocation ended."""

    returncode: int | None
    """None when it timed out."""
    final: str
    stderr: str
    seconds: float
    success: bool
    """Exited 0 with a final answer the grader accepts."""


def run_program(
    program: str,
    task: str,
    *,
    base_url: str,
    answer: str,
    grader: Grader,
    api_key: str = "none",
    model: str = "local",
    timeout_s: float = 900.0,
) -> ProgramRun:
    """Run `program` on `task` with its model at `base_url`, and grade its answer."""
    env = {
        **os.environ,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": api_key,
        "FAULTFINDER_AGENT_MODEL": model,
        "OTEL_SDK_DISABLED": "true",
    }
    started = time.monotonic()
    try:
        done = subprocess.run(
            shlex.split(program),
            input=task,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
        returncode: int | None = done.returncode
        stdout, stderr = done.stdout, done.stderr
    except subprocess.TimeoutExpired:
        returncode, stdout, stderr = None, "", f"timed out after {timeout_s:g} s"
    final = final_line(stdout) if returncode == 0 else ""
    success = returncode == 0 and grader.correct(task, answer, final)
    return ProgramRun(returncode, final, stderr[-4000:], time.monotonic() - started, success)
