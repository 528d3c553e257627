"""Superlatives checked against the records a tool returned.

"The cheapest flight is AF 1024" right after a search returned TP 433 at 89 EUR and
AF 1024 at 140 EUR states no figure of its own, so value provenance has nothing to check;
the claim is still plainly wrong, and the tool output says so. This module reads tool
outputs that are JSON or Python literals holding records (a list of objects), finds a
sentence that calls one record's name the cheapest, largest, … , and reports when that
record is beaten on every numeric field the sentence can mean, in the direction the word
says. It holds on any framework: it reads only text, and a claim is reported only when
every record list that names the claimed record disagrees with it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from faultfinder.attributors.model import Step, StepKind

__all__ = ["Contradiction", "Records", "Superlatives", "contradicted_superlative", "records_in"]

_LOWEST = (
    "cheapest", "lowest", "smallest", "least expensive", "shortest", "fewest", "minimum",
)  # fmt: skip
_HIGHEST = (
    "most expensive", "dearest", "highest", "largest", "biggest", "greatest", "longest",
    "maximum", "most popular", "best rated", "highest rated",
)  # fmt: skip
_ALTERNATIVES = "|".join(re.escape(w) for w in sorted(_LOWEST + _HIGHEST, key=len, reverse=True))
_WORDS = re.compile(rf"\b({_ALTERNATIVES})\b", re.IGNORECASE)
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_PRICE_WORDS = frozenset({"cheapest", "least expensive", "most expensive", "dearest"})
_PRICE_FIELD = re.compile(r"price|cost|fare|amount|fee|eur|usd|gbp|total", re.IGNORECASE)
_MAX_OUTPUT_CHARS = 200_000
"""Longer tool outputs are not parsed (the check stays cheap on long runs)."""
_MAX_RECORDS = 500


@dataclass(frozen=True)
class Records:
    """A tool's output read as records: each record's names (its short string values)
    and its numbers, by field (a record keyed by its name has that name under "")."""

    source: int
    """The step that returned them."""
    tool: str
    names: tuple[Mapping[str, str], ...]
    numbers: tuple[Mapping[str, float], ...]


@dataclass(frozen=True)
class Contradiction:
    claimed: str
    """The record the sentence calls the cheapest, largest, …"""
    word: str
    field: str
    claimed_value: float
    better: str
    """A record that beats it on `field`, in the direction `word` says."""
    better_value: float
    source: int
    tool: str

    def said_by(self, agent: str) -> str:
        """One sentence naming the claim and the record that beats it."""
        return (
            f"{agent} called {self.claimed} the {self.word.lower()} after {self.tool} had"
            f" returned {self.better} with {self.field} {_number(self.better_value)} against"
            f" {_number(self.claimed_value)} for {self.claimed}"
        )


def _number(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:,g}"


class Superlatives:
    """Walks a run in order: each tool output that holds records is remembered, and each
    acting step's text is checked against the records seen before it."""

    def __init__(self) -> None:
        self._observed: list[Records] = []

    def push(self, step: Step, *, acting: bool) -> Contradiction | None:
        found = None
        if acting and self._observed and step.content:
            found = contradicted_superlative(step.content, self._observed)
        answer = step.tool_result or (step.content if step.kind is StepKind.TOOL else None)
        records = records_in(answer, step.index, step.tool_name or step.agent)
        if records is not None:
            self._observed.append(records)
        return found


def records_in(text: str | None, source: int, tool: str) -> Records | None:
    """The records of a tool output in JSON or as a Python literal: a list of at least two
    objects, an object holding one such list, or an object of objects keyed by name; else
    None."""
    if not text or len(text) > _MAX_OUTPUT_CHARS:
        return None
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        data = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        # A Python literal: what frameworks that str() a tool's return value send
        # (the OpenAI Agents SDK, CrewAI, smolagents' printed observations).
        try:
            data = ast.literal_eval(stripped)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    items = _items(data)
    if items is None:
        return None
    names: list[dict[str, str]] = []
    numbers: list[dict[str, float]] = []
    for key, item in items:
        texts = {str(field): value for field, value in item.items() if isinstance(value, str)}
        if key is not None:
            texts[""] = key
        names.append(
            {field: text.strip() for field, text in texts.items() if 2 <= len(text.strip()) <= 80}
        )
        numbers.append(
            {
                str(field): float(value)
                for field, value in item.items()
                if isinstance(value, int | float) and not isinstance(value, bool)
            }
        )
    return Records(source, tool, tuple(names), tuple(numbers))


def _items(data: object) -> list[tuple[str | None, dict[str, object]]] | None:
    """(name key or None, record) for each record of a parsed JSON document."""
    if isinstance(data, dict):
        if len(data) >= 2 and all(isinstance(value, dict) for value in data.values()):
            keyed: list[tuple[str | None, dict[str, object]]] = [
                (str(key), value) for key, value in data.items()
            ]
            return keyed[:_MAX_RECORDS]
        lists = [value for value in data.values() if isinstance(value, list)]
        data = lists[0] if len(lists) == 1 else None
    if not isinstance(data, list) or not 2 <= len(data) <= _MAX_RECORDS:
        return None
    if not all(isinstance(item, dict) for item in data):
        return None
    return [(None, item) for item in data]


def _named(sentence: str, records: Records) -> tuple[int, str, str] | None:
    """The one record whose name the sentence mentions: its index, the field that holds
    the name, and the name (None for none or several records)."""
    found = {
        (index, field, name)
        for index, names in enumerate(records.names)
        for field, name in names.items()
        if name in sentence and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", sentence)
    }
    if len({index for index, _, _ in found}) != 1:
        return None
    return max(found, key=lambda item: len(item[2]))


def _name_of(records: Records, index: int, field: str) -> str:
    """How to call record `index`: by the same field the sentence named the other by,
    else its shortest name."""
    names = records.names[index]
    if field in names:
        return names[field]
    return min(names.values(), key=len, default=f"record {index + 1}")


def _fields(word: str, sentence: str, numbers: Mapping[str, float]) -> list[str]:
    """The numeric fields the superlative may be about: the ones the sentence names, else
    the price-like ones for a word about price, else all."""
    lowered = sentence.lower()
    named = [field for field in numbers if re.search(rf"\b{re.escape(field.lower())}\b", lowered)]
    if named:
        return named
    if word.lower() in _PRICE_WORDS:
        priced = [field for field in numbers if _PRICE_FIELD.search(field)]
        if priced:
            return priced
    return list(numbers)


def _judge_list(
    word: str, sentence: str, claimed: int, records: Records
) -> tuple[bool, tuple[str, float, int, float] | None]:
    """(whether the records compare the claimed one at all, and the first field on which
    another record beats it) — the claim stands when some compared field supports it,
    which the second item being None says."""
    lowest = word.lower() in _LOWEST
    mine = records.numbers[claimed]
    beaten: tuple[str, float, int, float] | None = None
    compared = False
    for field in _fields(word, sentence, mine):
        value = mine[field]
        others = [
            (index, numbers[field])
            for index, numbers in enumerate(records.numbers)
            if index != claimed and field in numbers
        ]
        if not others or len({value, *(v for _, v in others)}) < 2:
            continue  # a constant field says nothing
        compared = True
        pick = min if lowest else max
        best_index, best = pick(others, key=lambda other: other[1])
        if not ((best < value) if lowest else (best > value)):
            return True, None  # this field supports the claim
        if beaten is None:
            beaten = (field, value, best_index, best)
    return compared, beaten


def contradicted_superlative(text: str, observed: Sequence[Records]) -> Contradiction | None:
    """The first superlative in `text` that every record list naming its subject
    contradicts (`observed`: the record lists seen before the step, in run order)."""
    for sentence in _SENTENCES.split(text):
        for match in _WORDS.finditer(sentence):
            found = _judge(sentence, match.group(1), observed)
            if found is not None:
                return found
    return None


def _judge(sentence: str, word: str, observed: Sequence[Records]) -> Contradiction | None:
    contradiction: Contradiction | None = None
    for records in reversed(observed):
        named = _named(sentence, records)
        if named is None:
            continue
        claimed, name_field, name = named
        compared, beaten = _judge_list(word, sentence, claimed, records)
        if compared and beaten is None:
            return None  # some list supports the claim
        if beaten is not None and contradiction is None:
            field, value, best_index, best = beaten
            contradiction = Contradiction(
                claimed=name,
                word=word,
                field=field,
                claimed_value=value,
                better=_name_of(records, best_index, name_field),
                better_value=best,
                source=records.source,
                tool=records.tool,
            )
    return contradiction
