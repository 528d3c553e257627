"""Tool outputs read as records: the lists of objects a search or lookup returned, each
record's names and numbers by field, for `comparisons` to check what an agent says of them.

A tool output is read when it is JSON or a Python literal holding records (lists of
objects, at any depth, or objects keyed by name) or lines of `Name: field value; field
value` prose. Long outputs are not parsed, and the walk is bounded, so the check stays
cheap on long runs.
"""

from __future__ import annotations

import ast
import bisect
import math
import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import orjson

from faultfinder.attributors.provenance import same_figure

__all__ = ["Records", "line_records", "records_in"]

_TOKEN = re.compile(r"\w+")
_MAX_OUTPUT_CHARS = 200_000
"""Longer tool outputs are not parsed (the check stays cheap on long runs)."""
_MAX_LITERAL_CHARS = 20_000
_MAX_RECORDS = 500
_MAX_DEPTH = 6
_MAX_COLLECTIONS = 50


@dataclass(frozen=True)
class Records:
    """A tool's output read as records: each record's names (its short string values)
    and its numbers, by field (a record keyed by its name has that name under "")."""

    tool: str
    names: tuple[Mapping[str, str], ...]
    numbers: tuple[Mapping[str, float], ...]

    def named_in(self, sentence: str) -> set[tuple[int, str, str]]:
        """(record, field, name) of each record name the sentence holds as whole words."""
        by_token, untokened = self._names_by_token
        candidates = [*untokened]
        for token in set(_TOKEN.findall(sentence)):
            candidates.extend(by_token.get(token, ()))
        return {
            (index, field, name)
            for index, field, name in candidates
            if name in sentence and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", sentence)
        }

    def holders(self, value: float) -> list[tuple[int, str]]:
        """(record, field) of each value the records hold that is `value` (`same_figure`)."""
        keys, owners = self._figures
        margin = max(1e-4 * abs(value), 0.006)
        low = bisect.bisect_left(keys, value - margin)
        high = bisect.bisect_right(keys, value + margin)
        return [owners[i] for i in range(low, high) if same_figure(value, keys[i])]

    @cached_property
    def _names_by_token(
        self,
    ) -> tuple[dict[str, list[tuple[int, str, str]]], list[tuple[int, str, str]]]:
        """Each name under its longest word: a name found with word boundaries has every
        word of it among the sentence's words, so only names filed under one of them can
        be in the sentence (the names with no word are always tried)."""
        by_token: dict[str, list[tuple[int, str, str]]] = {}
        untokened: list[tuple[int, str, str]] = []
        for index, names in enumerate(self.names):
            for field, name in names.items():
                tokens = _TOKEN.findall(name)
                if tokens:
                    by_token.setdefault(max(tokens, key=len), []).append((index, field, name))
                else:
                    untokened.append((index, field, name))
        return by_token, untokened

    @cached_property
    def _figures(self) -> tuple[list[float], list[tuple[int, str]]]:
        entries = sorted(
            (value, index, field)
            for index, numbers in enumerate(self.numbers)
            for field, value in numbers.items()
            if math.isfinite(value)
        )
        return [value for value, _, _ in entries], [(i, field) for _, i, field in entries]


def records_in(text: str | None, tool: str) -> list[Records]:
    """The record lists of a tool output in JSON or as a Python literal: every list of at
    least two objects, and every object of at least two objects (keyed by name), at any
    depth (an order's items inside the order); in prose, its lines of the form
    `Name: field value; field value` (`line_records`)."""
    if not text or len(text) > _MAX_OUTPUT_CHARS:
        return []
    stripped = text.lstrip()
    if not stripped:
        return []
    if stripped[0] not in "[{":
        found = line_records(stripped, tool)
        return [found] if found is not None else []
    try:
        data = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        # A Python literal: what frameworks that str() a tool's return value send
        # (the OpenAI Agents SDK, CrewAI, smolagents' printed observations). Parsing one
        # is slower than JSON: only short ones are read.
        if len(stripped) > _MAX_LITERAL_CHARS:
            return []
        try:
            data = ast.literal_eval(stripped)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return []
    return [_records(items, tool) for items in _collections(data)]


_LINE = re.compile(r"^[ \t]*(?P<head>[^\W\d_][^:\n]{0,59}?)[ \t]*:[ \t]*(?P<rest>\S.*)$", re.M)
_PARTS = re.compile(r";|,\s")
_FIELD = re.compile(
    r"\s*(?P<field>[^\W\d_][^\W\d]*(?:[ '-][^\W\d]+){0,3})\s*[:=]?\s*"
    r"(?P<figure>-?\d[\d,]*(?:\.\d+)?)(?![\w.])"
)


def line_records(text: str, tool: str) -> Records | None:
    """The records of a prose tool output, one per line of the form `Name: field value;
    field value` with at least two numeric fields ("Varnholm: country Orlania; population
    48210; area 41.5 km2"), named by what precedes the colon. Only the name names such a
    record: the other words of a line are its values, not its identity."""
    names: list[dict[str, str]] = []
    numbers: list[dict[str, float]] = []
    for line in _LINE.finditer(text):
        fields: dict[str, float] = {}
        for part in _PARTS.split(line.group("rest")):
            found = _FIELD.match(part)
            if found is None:
                continue
            value = float(found.group("figure").replace(",", ""))
            fields.setdefault(found.group("field").lower(), value)
        head = line.group("head").strip()
        # One figure after a colon is a heading and its value ("Code output: Menu on
        # March 22, 2021"), not a record with values of its own.
        if len(fields) >= 2 and len(head) >= 2:
            names.append({"": head})
            numbers.append(fields)
        if len(names) >= _MAX_RECORDS:
            break
    if not names:
        return None
    return Records(tool, tuple(names), tuple(numbers))


def _records(items: Sequence[tuple[str | None, Mapping[str, object]]], tool: str) -> Records:
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
    return Records(tool, tuple(names), tuple(numbers))


def _collections(data: object) -> list[list[tuple[str | None, Mapping[str, object]]]]:
    """Each collection of records in a parsed document, outermost first: (name key or
    None, record) for each of its records. The walk stops at `_MAX_DEPTH` levels and
    `_MAX_COLLECTIONS` collections."""
    found: list[list[tuple[str | None, Mapping[str, object]]]] = []
    queue: deque[tuple[object, int]] = deque([(data, 0)])
    while queue and len(found) < _MAX_COLLECTIONS:
        node, depth = queue.popleft()
        if depth > _MAX_DEPTH:
            continue
        keyed: list[tuple[str | None, object]]
        if isinstance(node, dict):
            keyed = [(str(key), value) for key, value in node.items()]
        elif isinstance(node, list):
            keyed = [(None, item) for item in node]
        else:
            continue
        records: list[tuple[str | None, Mapping[str, object]]] = [
            (key, value) for key, value in keyed if isinstance(value, dict)
        ]
        if len(records) >= 2 and len(records) == len(keyed):
            found.append(records[:_MAX_RECORDS])
        queue.extend((value, depth + 1) for _, value in keyed if isinstance(value, dict | list))
    return found
