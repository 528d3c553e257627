"""A run's trajectory as its page shows it: each text cut to `PAGE_TEXT_CHARS`, saying
where the whole of it is.

A run of 300 steps of a megabyte each would otherwise be a page of hundreds of MB, which
no browser shows and which the server must build in memory first. Steps carry their
whole texts in the API (`/api/runs/{id}?steps_offset=N&steps_limit=1`), which the cut
text names.
"""

from __future__ import annotations

import urllib.parse

from faultfinder.attributors.model import Step, Trajectory

__all__ = ["PAGE_TEXT_CHARS", "page_trajectory"]

PAGE_TEXT_CHARS = 4000
"""Longest text (a step's content, tool arguments or result; the task, answers) a run page
shows; 250 steps of three such texts stay about 3 MB."""

_STEP_TEXTS = ("content", "tool_arguments", "tool_result")
_RUN_TEXTS = ("task", "final_answer", "ground_truth")


def page_trajectory(trajectory: Trajectory, run_id: str) -> Trajectory:
    """`trajectory` with its long texts cut (unchanged when none is long)."""
    raw = f"/api/runs/{urllib.parse.quote(run_id, safe='')}"
    steps = [_page_step(step, raw) for step in trajectory.steps]
    texts = {
        name: _cut(value, raw)
        for name in _RUN_TEXTS
        if isinstance(value := getattr(trajectory, name), str) and len(value) > PAGE_TEXT_CHARS
    }
    if not texts and all(new is old for new, old in zip(steps, trajectory.steps, strict=True)):
        return trajectory
    return trajectory.model_copy(update={"steps": tuple(steps), **texts})


def _page_step(step: Step, raw: str) -> Step:
    where = f"{raw}?steps_offset={step.index}&steps_limit=1"
    texts = {
        name: _cut(value, where)
        for name in _STEP_TEXTS
        if isinstance(value := getattr(step, name), str) and len(value) > PAGE_TEXT_CHARS
    }
    return step.model_copy(update=texts) if texts else step


def _cut(text: str, where: str) -> str:
    more = len(text) - PAGE_TEXT_CHARS
    return f"{text[:PAGE_TEXT_CHARS]}…[{more} more characters: the whole text is at {where}]"
