"""The elements of a Who&When Pro trace: its `trajectory` list with round-wrapped turns
unnested, each one a step of the record, plus the loose value readers they share."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from faultfinder.datasets.fields import Fields


@dataclass(frozen=True)
class ProElement:
    """One trajectory element (or one turn of a round-wrapped element)."""

    fields: Fields
    source: int
    """Position of the element in the file's `trajectory` list."""
    round: int | None = None
    """The enclosing round of a round-wrapped turn."""

    @property
    def kind(self) -> str | None:
        value = self.fields.data.get("kind")
        return value if isinstance(value, str) else None

    def get(self, name: str) -> Any:
        return self.fields.data.get(name)


def pro_elements(fields: Fields) -> list[ProElement]:
    """The trace's elements in order, one per step."""
    elements: list[ProElement] = []
    for source, element in enumerate(fields.mappings("trajectory")):
        if element.data.get("kind") == "round":
            # Round-wrapped frameworks (pixelcraft) nest one turn per agent; each turn is a
            # step, since the gold label points at a turn inside the round.
            round_number = element.integer("round")
            elements.extend(
                ProElement(turn, source, round_number) for turn in element.mappings("turns")
            )
        else:
            elements.append(ProElement(element, source))
    return elements


def int_or_none(value: Any) -> int | None:
    """An integer or a string of digits as an integer; anything else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def as_text(value: Any) -> str:
    """A string as it is, None as empty, anything else as indented JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=2)
