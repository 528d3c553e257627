"""Where the flawed reply shows in the sidecar's trajectory of an injected run."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from faultfinder.attributors.model import Step, StepKind, Trajectory
from faultfinder.injection.injectors import Injected

__all__ = ["LocatedStep", "locate_injected_step"]


@dataclass(frozen=True)
class LocatedStep:
    step: int | None
    first_difference: int | None
    why: str = ""


def _signature(step: Step) -> str:
    return " ".join(
        part
        for part in (step.agent, step.kind.value, step.content, step.tool_arguments or "")
        if part
    )


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold()


def locate_injected_step(run: Trajectory, recorded: Trajectory, injected: Injected) -> LocatedStep:
    """The step of `run` that shows the flawed reply.

    The replayed prefix makes `run` and the recorded successful run identical up to the
    first step the flaw changed; from there on, the first agent step whose text holds what
    the injector wrote (the whole flawed text, else the part it changed) is the step.
    """
    first = next(
        (
            index
            for index, (a, b) in enumerate(zip(run.steps, recorded.steps, strict=False))
            if _signature(a) != _signature(b)
        ),
        min(len(run.steps), len(recorded.steps)),
    )
    if first >= len(run.steps):
        return LocatedStep(None, first, "the run's steps equal the recorded run's")
    whole = _normal(injected.injected)
    fragments = [
        whole,
        *(_normal(part) for part in _changed_parts(injected.original, injected.injected)),
    ]
    for fragment in fragments:
        if not fragment:
            continue
        for index in range(first, len(run.steps)):
            step = run.steps[index]
            if step.kind in (StepKind.HUMAN, StepKind.SYSTEM, StepKind.TOOL):
                continue
            text = _normal(" ".join((step.content, step.tool_arguments or "")))
            if fragment in text or (len(text) > 40 and text in whole):
                return LocatedStep(index, first)
    return LocatedStep(None, first, "no step after the recorded prefix shows the flawed reply")


_PUNCTUATION = " \t\n,.;:'\"{}()[]"


def _changed_parts(original: str, injected: str) -> list[str]:
    """The runs of words of `injected` that are not in `original` (longest first; a
    number or a name changed is one such run)."""
    old, new = original.split(), injected.split()
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    parts = []
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            part = " ".join(new[j1:j2]).strip(_PUNCTUATION)
            if len(part) >= 2:
                parts.append(part)
    return sorted(parts, key=len, reverse=True)
