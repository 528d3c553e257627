"""A refusal and the earlier action that caused it. In a conversation with an agent that
changes orders, reservations or accounts, a failure often surfaces as an action that can
no longer be done ("order #W2378156 has already been modified and cannot be changed
again", a tool's "Error: non-pending order cannot be modified"), while what caused it is
an earlier call that changed that entity (a `modify_pending_order_items` made too early
or with the wrong items). The refusal is the symptom; the earlier call is the cause.

A symptom is a sentence of any step (an agent's, a tool's answer, a user's) saying so:
"no longer possible / eligible / pending / modifiable …", "cannot be changed / modified …
again / any more", "can only be modified once", "only pending orders can be …"; or a
state ("already cancelled / modified / …", "status is cancelled / delivered …",
"non-pending") said with a refusal ("cannot", "unable", "not allowed", "sorry, but",
"unfortunately", "error") and not of what the speaker itself did ("I have already
cancelled it"). What it is about are the identifiers it names ("#W2378156", "ORD-1042",
"HATHAT"; a bare number only after "order", "booking", …), else the one identifier its
step names, else, for a tool's refusal, the call it answers.

The cause is the earliest earlier call whose tool changes state (cancel, modify, update,
exchange, return, change, book, transfer, refund, delete, remove or upgrade in its name;
not a look-up such as `get_order_details`, not a handoff) with an argument that is that
identifier, and whose answer was not an error or a refusal (such a call changed nothing).
Only the first symptom naming an entity counts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import ClassVar

from faultfinder.attributors.excerpts import around, quoted
from faultfinder.attributors.model import Step, StepKind

__all__ = ["CausedRefusal", "LaterRefusals", "changes_state", "refusal"]

_DONE = (
    r"(?:cancell?ed|modified|exchanged|returned|processed|changed|booked|refunded|used|"
    r"updated|upgraded|transferred|redeemed|shipped|delivered|completed|closed|deleted|removed)"
)
_UNDONE = r"(?:changed|modified|cancell?ed|exchanged|returned|refunded|updated|edited|amended)"
_UNDO = r"(?:change|modify|cancel|exchange|return|refund|update|edit|amend)"
_REFUSES = re.compile(
    rf"""(?ix)
    \bno\ longer\ (?:be\ )?(?:possible|eligible|pending|modifiable|cancell?able|changeable|
        editable|refundable|exchangeable|returnable|{_UNDONE})\b
  | \b(?:cannot|can\ not|can['’]t|could\ not|couldn['’]t|unable\ to|not\ able\ to|
        not\ allowed\ to|not\ possible\ to)\s+(?:be\s+)?(?:{_UNDONE}|{_UNDO})\b
        [^.!?\n]{{0,40}}?\b(?:again|any\ ?more|a\ second\ time|twice)\b
  | \bcan\ only\ be\ {_UNDONE}\ once\b
  | \bonly\ (?:pending|unused|active|open|unshipped|unprocessed)\b[^.!?\n]{{0,30}}?
        \b(?:can|may)\ be\b
    """
)
"""A sentence that says in so many words that an action can no longer be done."""
_STATE = re.compile(
    rf"""(?ix)
    \balready\ (?:been\ )?{_DONE}\b
  | \bstatus["']?\s*(?:is|was|has\ been|changed\ to|:)\s*["']?(?:now\ )?
        (?:cancell?ed|delivered|processed|shipped|completed|closed|refunded|returned|exchanged)\b
  | \bnon-?pending\b
    """
)
"""A sentence that says what became of an entity: a symptom only beside a `_REFUSAL`."""
_REFUSAL = re.compile(
    rf"""(?ix)
    \b(?:cannot|can\ not|can['’]t|could\ not|couldn['’]t|unable|ineligible|unfortunately|
        denied|rejected)\b
  | \berror\b(?!["']?\s*[:=]\s*(?:null|none|false|""|''))
  | \bnot\ (?:be\ )?(?:possible|allowed|permitted|eligible|able|{_UNDONE})\b
  | \bsorry,?\ but\b
    """
)
_OWN = re.compile(r"(?i)\b(?:I|we)(?:['’]ve|['’]d| have| had)?\s+(?:\w+\s+)?already\b")
"""What the speaker says it did itself ("I have already cancelled it"): no refusal."""
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_ID = re.compile(
    r"#[A-Za-z0-9][\w-]*"  # "#W2378156"
    r"|\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]{2,}[A-Za-z0-9]\b"  # "ORD-1042"
    r"|\b[A-Z]{5,8}\b"  # "HATHAT"
    r"|(?i:\b(?:order|booking|reservation|ticket|account|confirmation|case|id|number|no\.?)"
    r"\s*(?:#|:|number|no\.?)?\s*)(\d{4,})\b"  # "order 1042"
)
_CHANGES = (
    "cancel", "modify", "update", "exchange", "return", "change", "book", "transfer", "refund",
    "delete", "remove", "upgrade",
)  # fmt: skip
_LOOKS = frozenset({
    "get", "list", "search", "find", "check", "lookup", "look", "view", "fetch", "show", "read",
    "query", "describe", "calculate", "validate", "verify", "preview", "estimate", "quote", "think",
})  # fmt: skip
_PAST = {"modify": "modified", "cancel": "cancelled", "transfer": "transferred"}
_NAME_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_ENDINGS = frozenset({"s", "es", "ed", "d", "ing", "ied", "ies", "led", "ling"})
_KEY_NOUN = re.compile(r"(?i)^([a-z]+(?:_[a-z]+)?)_?(?:id|code|number|no)$")


def _verb(part: str) -> str | None:
    """The state-changing verb a part of a tool's name is a form of ("cancelled": cancel)."""
    for verb in _CHANGES:
        stem = verb[:-1] if verb.endswith(("e", "y")) else verb
        if part == verb or (part.startswith(stem) and part[len(stem) :] in _ENDINGS):
            return verb
    return None


def changes_state(tool: str) -> str | None:
    """The verb by which a tool changes state ("modify" for `modify_pending_order_items`),
    None for a look-up (`get_order_details`, `check_refund_status`) or a handoff
    (`transfer_to_human_agents`)."""
    parts = [part.lower() for part in _NAME_PART.findall(tool)]
    if not parts or parts[0] in _LOOKS or parts[:2] == ["transfer", "to"]:
        return None
    return next((verb for verb in map(_verb, parts) if verb is not None), None)


def refusal(text: str) -> tuple[str, list[str]] | None:
    """The first sentence of `text` saying an action can no longer be done, as a short
    quotation, with the identifiers that sentence names; None for none."""
    for sentence in _SENTENCE.split(text):
        said = _REFUSES.search(sentence)
        if said is None:
            state = _STATE.search(sentence)
            if state and _REFUSAL.search(sentence) and not _OWN.search(sentence):
                said = state
        if said is not None:
            short = len(sentence) <= 120
            shown = quoted(sentence if short else around(sentence, said.start(), said.end(), 50))
            return shown, _ids(sentence)
    return None


def _ids(text: str) -> list[str]:
    """The identifiers a text names, as `_key`s, in order."""
    found = (m.group(1) or m.group(0) for m in _ID.finditer(text))
    return list(dict.fromkeys(_key(token) for token in found))


def _key(value: str) -> str:
    return value.strip().lstrip("#").casefold()


def _named(value: object, key: str = "") -> list[tuple[str, str]]:
    """The identifier-like values of a call's arguments: (argument, value as written)."""
    if isinstance(value, dict):
        return [pair for k, v in value.items() for pair in _named(v, str(k))]
    if isinstance(value, list):
        return [pair for item in value for pair in _named(item, key)]
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1000:
        return [(key, str(value))]
    if isinstance(value, str) and 3 <= len(value.strip()) <= 40 and " " not in value.strip():
        return [(key, value.strip())]
    return []


def _calls(step: Step) -> list[tuple[str, dict[str, object]]]:
    """The calls a step makes, with their arguments: its recorded call, and for an acting
    step every `name({...})` its text writes."""
    raw = [(step.tool_name or "tool", step.tool_arguments)] if step.tool_arguments else []
    if not _is_answer(step) and "({" in step.content:
        raw += re.findall(r"([A-Za-z_][\w.-]*)\((\{.*?\})\)", step.content, re.DOTALL)
    out: list[tuple[str, dict[str, object]]] = []
    for tool, text in raw:
        try:
            arguments = json.loads(text)
        except ValueError:
            continue
        if isinstance(arguments, dict):
            out.append((tool, arguments))
    return out


def _is_answer(step: Step) -> bool:
    return step.kind is StepKind.TOOL or bool(step.tool_result)


@dataclass
class _Call:
    """A call made in the run, and what its answer said of it."""

    step: int
    actor: int | None
    tool: str
    arguments: dict[str, object]
    verb: str | None = None
    failed: bool = False
    ids: dict[str, tuple[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.verb = changes_state(self.tool)
        if self.verb is not None:
            self.ids = {_key(v): (k, v) for k, v in reversed(_named(self.arguments))}


@dataclass(frozen=True)
class CausedRefusal:
    """An action on an entity refused at step `symptom`, after the call that changed it,
    which the acting step `cause` made."""

    kind: ClassVar[str] = "caused-later-refusal"
    cause: int
    agent: str
    tool: str
    verb: str
    noun: str
    entity: str
    symptom: int
    said: str

    def _did(self) -> str:
        past = _PAST.get(self.verb, self.verb + ("d" if self.verb.endswith("e") else "ed"))
        return f"{self.agent} {past} {self.noun}{' ' * bool(self.noun)}{self.entity}"

    def caused(self) -> str:
        """One sentence for the cause: what the agent did, and what it later blocked."""
        it = f"the {self.noun}" if self.noun else self.entity
        return (
            f"{self._did()} at step {self.cause} ({self.tool}); at step {self.symptom} {it}"
            f" could no longer be changed: {self.said}"
        )

    def shown(self) -> str:
        """One sentence for the symptom: the refusal follows from the earlier call."""
        return f"this refusal follows from step {self.cause}, where {self._did()} ({self.tool})"


class LaterRefusals:
    """Walks a run: remembers each call and whether its answer was an error or a refusal;
    at the first symptom naming an entity, finds the call that changed it
    (`CausedRefusal`). `actor` is the acting step that made the step's calls
    (`learned.blame.callers`); `error` says the step shows an error."""

    def __init__(self) -> None:
        self._open: list[_Call] = []
        self._changes: list[_Call] = []
        self._refused: set[str] = set()
        self._agents: dict[int, str] = {}

    def push(
        self, step: Step, i: int, *, actor: int | None, error: bool = False
    ) -> CausedRefusal | None:
        self._agents[i] = step.agent
        made = [_Call(i, actor, tool, arguments) for tool, arguments in _calls(step)]
        answered = self._answered(step, made) if _is_answer(step) else None
        if answered is not None and answered not in made:  # the answer records its call
            made = [call for call in made if call.arguments != answered.arguments]
        texts = [step.content, step.tool_result or "", step.error or ""]
        found = None if step.kind is StepKind.SYSTEM else refusal("\n".join(texts))
        if answered is not None and (error or found is not None):
            answered.failed = True
        self._open.extend(call for call in made if call is not answered)
        self._changes.extend(call for call in made if call.ids)
        if found is None:
            return None
        said, ids = found
        ids = ids or (_ids(step.content) if len(_ids(step.content)) == 1 else [])
        if not ids and answered is not None:
            ids = list(answered.ids)
        out = None
        for entity in ids:
            if entity not in self._refused and out is None:
                out = self._cause(entity, i, said)
            self._refused.add(entity)
        return out

    def _answered(self, step: Step, made: list[_Call]) -> _Call | None:
        """The call a tool's answer answers: the earliest open call of its tool (with its
        arguments, where it records them), else the call it records itself."""
        for call in self._open:
            same = not made or (call.tool, call.arguments) == (made[0].tool, made[0].arguments)
            if call.tool == (step.tool_name or call.tool) and same:
                self._open.remove(call)
                return call
        return made[0] if made else None

    def _cause(self, entity: str, i: int, said: str) -> CausedRefusal | None:
        for call in self._changes:
            if entity in call.ids and not call.failed and call.step < i:
                if call.actor is None or call.verb is None:
                    continue
                key, written = call.ids[entity]
                noun = _KEY_NOUN.match(key)
                return CausedRefusal(
                    cause=call.actor,
                    agent=self._agents.get(call.actor, ""),
                    tool=call.tool,
                    verb=call.verb,
                    noun=noun.group(1).replace("_", " ") if noun else "",
                    entity=written,
                    symptom=i,
                    said=said,
                )
        return None
