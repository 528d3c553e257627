"""Steps only model calls' inputs record (the assembler's rules 7 and 8).

A model call whose input carries the conversation so far shows what no span of the run
recorded: the turns the user took after the model answered, and the reports of tool
calls an instrumentation did not trace. `with_steps_from_model_inputs` adds those that
belong to this run as steps of their own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from faultfinder.attributors.model import Step, StepKind
from faultfinder.reading.mapping import MappedSpan

__all__ = ["with_steps_from_model_inputs"]

_LABEL_CHARS = 32
"""At most this much text around an earlier step's words makes a relay of them
("Observation: …", "census_agent said: …")."""
_QUOTE_CHARS = 16
"""A turn at least this long found inside an earlier step's text repeats it; a shorter
one ("yes", "ok, go ahead") is the user's own."""


def with_steps_from_model_inputs(
    steps: tuple[Step, ...], step_facts: Sequence[MappedSpan]
) -> tuple[Step, ...]:
    """`steps` with the user's later turns (rule 7) as `human` steps and the tools' reports
    no span recorded (rule 8) as `tool` steps, re-indexed; `step_facts` are the mapped
    facts of each step's span, in step order."""
    if not any(facts.later_user_turns or facts.tool_reports for facts in step_facts):
        return steps
    recorded_tools = {step.tool_name for step in steps if step.kind is StepKind.TOOL}
    callers: dict[str, str] = {}
    said: list[str] = []
    taken: set[str] = set()
    reported: set[tuple[str, str]] = set()
    out: list[Step] = []
    for step, facts in zip(steps, step_facts, strict=True):
        for report in facts.tool_reports:
            key = (_call_key(report.tool_name, report.arguments), _plain(report.report))
            caller = callers.get(key[0])
            if report.tool_name in recorded_tools or key in reported or caller is None:
                continue
            reported.add(key)
            said.append(key[1])
            out.append(
                Step(
                    index=0,
                    agent=caller,
                    kind=StepKind.TOOL,
                    content=report.report,
                    tool_name=report.tool_name,
                    tool_arguments=report.arguments,
                    tool_result=report.report,
                    start_time=step.start_time,
                    end_time=step.start_time,
                    metadata={"from_model_input": True},
                )
            )
        for answered, text in facts.later_user_turns:
            turn = _plain(text)
            if turn in taken or not _said(_plain(answered), said) or _echoes(turn, said):
                continue
            taken.add(turn)
            out.append(
                Step(
                    index=0,
                    agent=_USER,
                    kind=StepKind.HUMAN,
                    content=text,
                    role="user",
                    start_time=step.start_time,
                    end_time=step.start_time,
                )
            )
        out.append(step)
        said.extend(
            plain
            for text in (step.content, step.tool_result, step.tool_arguments)
            if text and (plain := _plain(text))
        )
        if step.kind is not StepKind.TOOL and step.content:
            # A model reply asking for tools says each call on a line of its own.
            for line in step.content.splitlines():
                if called := _CALL_LINE.match(line.strip()):
                    callers.setdefault(_call_key(*called.groups()), step.agent)
    if len(out) == len(steps):
        return steps
    return tuple(step.model_copy(update={"index": i}) for i, step in enumerate(out))


_USER = "user"
_CALL_LINE = re.compile(r"^([^\s(]+)\((.*)\)$", re.DOTALL)
"""A line of a step saying a tool call, as the mapping writes one: `name(arguments)`."""


def _call_key(name: str, arguments: str | None) -> str:
    """A tool call as a key that ignores how its arguments were written: a model's reply
    and a later call's input may spell the same JSON with other spacing or key order."""
    try:
        spelled = json.dumps(json.loads(arguments or "null"), sort_keys=True)
    except (ValueError, TypeError, RecursionError):
        spelled = _plain(arguments or "")
    return f"{name.strip()}({spelled})"


def _plain(text: str) -> str:
    return " ".join(text.split()).casefold()


def _said(answered: str, said: Sequence[str]) -> bool:
    """Whether a step of the run said `answered` (the assistant's message a user turn
    follows): a user answers what the agents said in this run, not an example
    conversation in a prompt (few-shot demonstrations) or an earlier run's."""
    if not answered:
        return False
    return any(
        answered == earlier
        or (
            min(len(answered), len(earlier)) >= _QUOTE_CHARS
            and (answered in earlier or earlier in answered)
        )
        for earlier in said
    )


def _echoes(turn: str, said: Sequence[str]) -> bool:
    """Whether `turn` relays what an earlier step said: the same text, that text with a
    short label around it, mostly that text, or a long enough piece of it."""
    for earlier in said:
        if earlier in turn:
            relayed = len(turn) - len(earlier) <= _LABEL_CHARS and (
                turn.startswith(earlier) or turn.endswith(earlier)
            )
            if relayed or (len(earlier) >= _QUOTE_CHARS and 2 * len(earlier) >= len(turn)):
                return True
        elif len(turn) >= _QUOTE_CHARS and turn in earlier:
            return True
    return False
