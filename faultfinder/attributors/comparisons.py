"""What an agent says of records a tool returned, checked against them.

"The cheapest flight is AF 1024" right after a search returned TP 433 at 89 EUR and
AF 1024 at 140 EUR states no figure of its own, so value provenance has nothing to check;
"Returning the Office Chair refunds 47.84" states a figure a tool did return, so value
provenance finds it supported. Both are plainly wrong, and the tool output says so. This
module reads tool outputs that are JSON or Python literals holding records (lists of
objects, at any depth), or lines of `Name: field value; field value` prose (reading them
is `tool_records`), and finds a sentence that calls one record the cheapest, largest, …
while another beats it on every numeric field the sentence can mean
(`contradicted_superlative`), or that gives one record a figure its list holds for exactly
one other record and none of its own (`misattributed_figure`), or that gives a record's
figure to a name that is neither that record nor anything the task speaks of ("The
population of Orlania is 48,210" after "Varnholm: country Orlania; population 48210":
`misattributed_figure` too). It holds on any framework: it reads only text, and a claim
is reported only when the records leave no other reading of it.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from faultfinder.attributors.model import Step, StepKind
from faultfinder.attributors.provenance import figures_in, same_figure
from faultfinder.attributors.tool_records import Records, records_in

__all__ = [
    "Contradiction",
    "Finding",
    "Misattribution",
    "RecordChecks",
    "Records",
    "contradicted_superlative",
    "misattributed_figure",
    "records_in",
]

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
_MAX_REMEMBERED = 20
"""Record lists a claim is checked against: the most recent ones (a long run's claims
are about what its tools just returned, and the check stays linear in the run)."""


@dataclass(frozen=True)
class Contradiction:
    kind: ClassVar[str] = "contradicts-records"
    claimed: str
    """The record the sentence calls the cheapest, largest, …"""
    word: str
    field: str
    claimed_value: float
    better: str
    """A record that beats it on `field`, in the direction `word` says."""
    better_value: float
    tool: str

    def said_by(self, agent: str) -> str:
        """One sentence naming the claim and the record that beats it."""
        return (
            f"{agent} called {self.claimed} the {self.word.lower()} after {self.tool} had"
            f" returned {self.better} with {self.field} {_number(self.better_value)} against"
            f" {_number(self.claimed_value)} for {self.claimed}"
        )


def _number(value: float) -> str:
    return f"{value:,.0f}" if value.is_integer() else f"{value:,g}"


@dataclass(frozen=True)
class Misattribution:
    kind: ClassVar[str] = "misattributed-figure"
    named: str
    """The record the sentence speaks of."""
    figure: str
    """The figure the sentence gives it, as written."""
    owner: str
    """The record that figure belongs to."""
    field: str
    own_value: float | None
    """The named record's own value of `field`, if it has one."""
    tool: str

    def said_by(self, agent: str) -> str:
        """One sentence naming the figure, whose it is, and the named record's own."""
        own = (
            f" ({self.named}'s is {_number(self.own_value)})" if self.own_value is not None else ""
        )
        return (
            f"{agent} gave {self.named} the figure {self.figure}, which {self.tool} had"
            f" returned as the {self.field} of {self.owner}{own}"
        )


Finding = Contradiction | Misattribution


class RecordChecks:
    """Walks a run in order: each tool output that holds records is remembered, and each
    acting step's text is checked against the records seen before it: a superlative they
    contradict (`contradicted_superlative`), or a figure of one record given to another
    record or to a name the task does not speak of (`misattributed_figure`)."""

    def __init__(self, task: str = "") -> None:
        self._observed: deque[Records] = deque(maxlen=_MAX_REMEMBERED)
        self._task = task

    def push(self, step: Step, *, acting: bool) -> Finding | None:
        found: Finding | None = None
        if acting and self._observed and step.content:
            found = contradicted_superlative(step.content, self._observed)
            if found is None:
                found = misattributed_figure(step.content, self._observed, self._task)
        answer = step.tool_result or (step.content if step.kind is StepKind.TOOL else None)
        self._observed.extend(records_in(answer, step.tool_name or step.agent))
        return found


def _named(sentence: str, records: Records) -> tuple[int, str, str] | None:
    """The one record whose name the sentence mentions: its index, the field that holds
    the name, and the name (None for none or several records)."""
    found = records.named_in(sentence)
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
                tool=records.tool,
            )
    return contradiction


def misattributed_figure(
    text: str, observed: Sequence[Records], task: str = ""
) -> Misattribution | None:
    """The first sentence of `text` that speaks of exactly one record of a list and gives
    it a figure that list holds for exactly one other record, while giving it none of its
    own values (a sentence that also states the record's own figure is comparing, not
    mixing records up); or that gives a record's figure to a name (`_foreign_names`)
    while never naming that record (`_transferred`)."""
    for sentence in _SENTENCES.split(text):
        for records in reversed(observed):
            found = _misattributed(sentence, records) or _transferred(sentence, records, task)
            if found is not None:
                return found
    return None


def _misattributed(sentence: str, records: Records) -> Misattribution | None:
    named = _named(sentence, records)
    if named is None:
        return None
    index, name_field, name = named
    stated = _stated(sentence, records)
    if not stated:
        return None
    own = records.numbers[index]
    if any(same_figure(value, mine) for value in stated for mine in own.values()):
        return None
    for value, spelling in stated.items():
        owners = [(other, field) for other, field in records.holders(value) if other != index]
        if len({other for other, _ in owners}) == 1:
            other, field = owners[0]
            return Misattribution(
                named=name,
                figure=spelling,
                owner=_name_of(records, other, name_field),
                field=field,
                own_value=own.get(field),
                tool=records.tool,
            )
    return None


_NAME = re.compile(r"(?<![\w'])[A-Z][a-z][\w'-]*(?:[ \t]+[A-Z][a-z][\w'-]*)*")
_OPENERS = frozenset((
    "a", "an", "the", "this", "that", "these", "those", "it", "its", "there", "here", "i",
    "we", "you", "your", "my", "our", "he", "she", "they", "his", "her", "their", "in",
    "on", "at", "for", "from", "to", "with", "by", "based", "according", "so", "therefore",
    "thus", "hence", "yes", "no", "after", "before", "as", "if", "when", "since",
    "because", "then", "also", "however", "note", "sure", "answer", "final", "result",
    "total", "let", "using", "now", "given", "both", "each", "all", "some", "one", "per",
    "about", "overall",
))  # fmt: skip
"""Words that open a sentence far more often than they name anything."""


def _foreign_names(sentence: str, records: Records, task: str) -> list[str]:
    """The names a sentence gives (runs of capitalised words) that are no record's name,
    no field of the list and nowhere in the task: what the sentence speaks of, if not a
    record. A name opening the sentence comes last, and only when it is not a common
    opener ("The", "Based"): a capitalised first word is capitalised for its place."""
    known = {name.lower() for names in records.names for name in names.values()}
    known.update(field for numbers in records.numbers for field in numbers)
    lowered_task = task.lower()
    inside: list[str] = []
    opening: list[str] = []
    for match in _NAME.finditer(sentence):
        words = match.group().split()
        first = not sentence[: match.start()].strip(" \t\"'(*-#")
        if first:
            while words and words[0].lower() in _OPENERS:
                words = words[1:]
        name = " ".join(words)
        lowered = name.lower()
        if len(name) < 3 or lowered in known or lowered in lowered_task:
            continue
        (opening if first else inside).append(name)
    return inside + opening


def _transferred(sentence: str, records: Records, task: str) -> Misattribution | None:
    """A sentence that gives a figure the list holds for exactly one record, says which
    of that record's values it is (the field's name), never names the record and names
    something else (`_foreign_names`): "The population of Orlania is 48,210" after
    "Varnholm: country Orlania; population 48210"."""
    stated = _stated(sentence, records)
    if not stated:
        return None
    lowered = sentence.lower()
    for value, spelling in stated.items():
        owners = set(records.holders(value))
        if len({index for index, _ in owners}) != 1:
            continue
        index = next(iter(owners))[0]
        # The sentence must say which of the record's values it gives ("the population
        # of …"): a bare sum ("a refund of 47.84 to your PayPal account") is not about
        # whose the figure is.
        said = sorted(field for _, field in owners if _mentions(lowered, field))
        if not said or any(_mentions(lowered, name) for name in records.names[index].values()):
            continue
        foreign = _foreign_names(sentence, records, task)
        if not foreign:
            return None
        return Misattribution(
            named=foreign[0],
            figure=spelling,
            owner=_name_of(records, index, ""),
            field=said[0],
            own_value=None,
            tool=records.tool,
        )
    return None


def _stated(sentence: str, records: Records) -> dict[float, str]:
    """The figures a sentence states, read after the names of the records it mentions are
    taken out: the digits of a name ("AF 1024") are its name, not a figure."""
    bare = sentence
    for _, _, name in records.named_in(sentence):
        bare = bare.replace(name, " ")
    return figures_in(bare)


def _mentions(lowered: str, text: str) -> bool:
    """Whether `lowered` (a sentence in lower case) holds `text` as whole words."""
    wanted = text.lower()
    return wanted in lowered and bool(re.search(rf"(?<!\w){re.escape(wanted)}(?!\w)", lowered))
