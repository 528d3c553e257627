"""What a simulated user withheld that its own instructions gave it.

A run with a simulated user that is part of the system under test (τ-bench's customer,
named in the run's roster: metadata `simulated_user`) may carry that user's instructions (metadata
`user_instruction`: what the simulator was told to want and to know). A user turn that
says it does not have, know or remember an identifier the instructions give it (a user
id, an email address, a reservation or order number), when the instructions do not tell
it to say so and the run never comes by that identifier afterwards, left the agent
unable to reach the account or booking the task is about: the user's turn is where the
run went wrong, not what the agent did next.

The rule is fixed (not fitted): the patterns say what a denial and each kind of
identifier look like in English, whatever the harness or framework, and each finding
names the identifier the instructions hold. A customer writing in another language is
not read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from faultfinder.attributors.excerpts import quoted
from faultfinder.attributors.model import Step, StepKind, Trajectory

__all__ = ["UserWithheld", "user_instruction", "withheld_by_user"]

_DENIAL = re.compile(
    r"(?:\b(?:don't|dont|do not|doesn't|does not|can't|cant|cannot|can not|couldn't"
    r"|could not|no longer|unable to|not able to)\b"
    r"[^.?!\n]{0,30}?\b(?:have|know|remember|recall|find|locate|access|got)\b"
    r"|\b(?:forgot|forgotten|lost|misplaced)\b)"
    r"(?P<what>[^.?!\n]{0,50})",
    re.IGNORECASE,
)
"""A turn saying its speaker does not have, know or remember something, or forgot or lost
it; `what` is the rest of the clause, where the thing is named."""
_NOT_DENIAL_AFTER = re.compile(r"^\s*(?:any )?(?:other|another|more|further|anything else)\b")
"""`don't have any other questions`, `don't know another way`: no identifier is denied."""

_KINDS: dict[str, re.Pattern[str]] = {
    "user id": re.compile(
        r"\b(?:user ?id|user ?name|username|account (?:id|number)|customer (?:id|number)"
        r"|(?<!reservation )(?<!booking )(?<!order )(?<!confirmation )id)\b",
        re.IGNORECASE,
    ),
    "email address": re.compile(r"\be-?mail\b", re.IGNORECASE),
    "reservation or order number": re.compile(
        r"\b(?:reservation|booking|confirmation|order)s?\b", re.IGNORECASE
    ),
}
"""Each kind of identifier a user is asked for, by how a turn names it."""
_PRONOUN = re.compile(
    r"^\s*(?:any of |either of |both of )?(?:those|these|them|it|that|either|both)\b"
)

_CODE = r"#?(?P<value>(?-i:[A-Z0-9][A-Z0-9-]{4,19})(?![\w-])|(?=[\w-]*\d)[\w-]{3,40}(?![\w-]))"
"""An identifier as written right after the word for it: capitals and digits (`HXDUBJ`,
`W2378156`, `U-4821`) or any token with a digit in it (`1234567`, `cust_8841`)."""
_VALUES: dict[str, tuple[re.Pattern[str], ...]] = {
    "user id": (
        re.compile(r"(?P<value>\b[a-z][a-z0-9]*(?:_[a-z0-9]+)*_\d{2,}\b)"),
        re.compile(
            r"\b(?:user|customer|account|member)(?: ?id| ?name| number)(?: is)?[\s:#]{1,3}" + _CODE,
            re.IGNORECASE,
        ),
    ),
    "email address": (re.compile(r"(?P<value>\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b)"),),
    "reservation or order number": (
        re.compile(
            r"\b(?:reservation|booking|confirmation|order)s?(?: (?:id|number|code))?(?: is)?"
            r"[\s:#]{1,3}" + _CODE,
            re.IGNORECASE,
        ),
    ),
}
"""How the instructions write each kind of identifier: a user id like `ethan_martin_2396`
or one right after the words for it ("customer id U-4821"), an email address, or a
reservation or order code right after the word for it ("reservation HXDUBJ", "order
#W2378156")."""

_TOLD_NOT_TO_KNOW = re.compile(
    r"\b(?:don't|do not|does not|doesn't|not|never|cannot|can't|forgot|forget|lost)\b"
    r"[^.\n]{0,20}?\b(?:have|know|remember|recall|find|give|provide|share|forgot|forget|lost)\b",
    re.IGNORECASE,
)
"""An instruction telling the user it lacks something (then saying so is no deviation)."""
_TOLD_WINDOW = 80
"""Characters around such an instruction searched for the kind of identifier it means."""


@dataclass(frozen=True)
class UserWithheld:
    step: int
    user: str
    kind: str
    value: str
    excerpt: str

    def text(self) -> str:
        return (
            f"At step {self.step}, {self.user} said they did not have their {self.kind}"
            f" ({quoted(self.excerpt)}), though their instructions give it ({self.value});"
            " the run never came by it afterwards."
        )


def user_instruction(trajectory: Trajectory) -> str | None:
    """The simulated user's instructions, when the run carries them."""
    instruction = trajectory.metadata.get("user_instruction")
    return instruction if isinstance(instruction, str) and instruction.strip() else None


def withheld_by_user(trajectory: Trajectory) -> UserWithheld | None:
    """The first user turn that withheld an identifier its instructions give it, after
    which the run never came by it (see the module's docstring); None without a simulated
    user's instructions."""
    instruction = user_instruction(trajectory)
    if instruction is None:
        return None
    instruction = _plain(instruction)
    given = {kind: _values(kind, instruction) for kind in _KINDS}
    given = {
        kind: values
        for kind, values in given.items()
        if values and not _told_not_to_know(kind, instruction)
    }
    if not given:
        return None
    # Only a user that is one of the system's participants may be blamed (a simulated
    # user: the run's roster names it).
    participants = set(trajectory.declared_roster)
    steps = trajectory.steps
    for i, step in enumerate(steps):
        if step.kind is not StepKind.HUMAN or step.agent not in participants:
            continue
        for kind, excerpt in _denied(step, _asked_before(steps, i)):
            if kind not in given:
                continue
            later = _plain(" ".join(_text(s) for s in steps[i + 1 :])).casefold()
            found = [value for value in given[kind] if value.casefold() in later]
            if not found:
                return UserWithheld(i, step.agent, kind, given[kind][0], excerpt)
    return None


def _plain(text: str) -> str:
    return text.replace("\u2019", "'").replace("\u2018", "'")


def _text(step: Step) -> str:
    return " ".join(part for part in (step.content, step.tool_arguments, step.tool_result) if part)


def _values(kind: str, instruction: str) -> list[str]:
    values = [
        match.group("value") for pattern in _VALUES[kind] for match in pattern.finditer(instruction)
    ]
    return list(dict.fromkeys(values))


def _told_not_to_know(kind: str, instruction: str) -> bool:
    for match in _TOLD_NOT_TO_KNOW.finditer(instruction):
        window = instruction[max(0, match.start() - _TOLD_WINDOW) : match.end() + _TOLD_WINDOW]
        if _KINDS[kind].search(window):
            return True
    return False


def _asked_before(steps: tuple[Step, ...], i: int) -> set[str]:
    """The kinds of identifier the last agent turn before step `i` named (what a user's
    "I don't have those" refers to)."""
    for step in reversed(steps[:i]):
        if step.kind in (StepKind.HUMAN, StepKind.TOOL, StepKind.SYSTEM):
            continue
        text = _plain(step.content)
        return {kind for kind, pattern in _KINDS.items() if pattern.search(text)}
    return set()


def _denied(step: Step, asked: set[str]) -> list[tuple[str, str]]:
    """The kinds of identifier a user turn says it does not have, with the words."""
    text = _plain(step.content)
    out: list[tuple[str, str]] = []
    for match in _DENIAL.finditer(text):
        what = match.group("what")
        if _NOT_DENIAL_AFTER.match(what):
            continue
        excerpt = " ".join(text[match.start() : match.end()].split())
        kinds = [kind for kind, pattern in _KINDS.items() if pattern.search(what)]
        if not kinds and _PRONOUN.match(what):
            kinds = sorted(asked)
        out.extend((kind, excerpt) for kind in kinds)
    return out
