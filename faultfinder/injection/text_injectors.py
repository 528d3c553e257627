"""Deterministic injectors of an agent's text: a made-up or miscalculated figure (R.1,
R.3), a reversed comparison or a swapped name (R.2), figures withheld (C.2)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from faultfinder.injection.context import Injected, InjectionContext
from faultfinder.injection.exchanges import reply_text, reply_tool_calls, with_message
from faultfinder.injection.figures import (
    ENTITY,
    STOP_ENTITIES,
    WORD,
    fabricated,
    figure_value,
    figures_of_answer,
    number_tokens,
    replace_span,
    slipped,
    values_in,
)


@dataclass(frozen=True)
class _NumberInjector:
    """R.1 changes a figure the reply relays from an observation into one no observation
    holds; R.3 makes a slip in a figure the reply computed (or, failing that, relays)."""

    mode: str

    @property
    def name(self) -> str:
        return f"number-{self.mode}"

    def __call__(self, context: InjectionContext) -> Injected | None:
        text = reply_text(context.reply)
        if not text or reply_tool_calls(context.reply):
            return None
        seen = values_in(context.observations)
        matches = number_tokens(text)
        relayed = [m for m in matches if figure_value(m.group()) in seen]
        computed = [m for m in matches if figure_value(m.group()) not in seen]
        pool = relayed if self.mode == "R.1" else (computed or relayed)
        if not pool:
            return None
        target = context.rng.choice(pool)
        value = figure_value(target.group())
        assert value is not None
        avoid = seen | values_in(text) | figures_of_answer(context.answer)
        change = fabricated if self.mode == "R.1" else slipped
        new = change(value, target.group(), context.rng, avoid)
        if new is None:
            return None
        flawed = text.replace(target.group(), new)
        what = "a figure no observation holds" if self.mode == "R.1" else "a calculation slip"
        return Injected(
            self.mode,
            with_message(context.reply, flawed, None),
            text,
            flawed,
            f"{target.group()} became {new} ({what})",
        )


_FLIPS = {
    "more": "less", "less": "more", "higher": "lower", "lower": "higher",
    "larger": "smaller", "smaller": "larger", "largest": "smallest", "smallest": "largest",
    "greater": "smaller", "highest": "lowest", "lowest": "highest", "most": "least",
    "least": "most", "before": "after", "after": "before", "above": "below",
    "below": "above", "increase": "decrease", "decrease": "increase", "bigger": "smaller",
    "biggest": "smallest", "cheaper": "dearer", "cheapest": "dearest", "older": "younger",
    "oldest": "youngest", "younger": "older", "youngest": "oldest", "north": "south",
    "south": "north", "east": "west", "west": "east", "maximum": "minimum",
    "minimum": "maximum", "max": "min", "min": "max",
}  # fmt: skip


@dataclass(frozen=True)
class _ReasoningInjector:
    """R.2: a comparison reversed (`larger` → `smaller`), else an entity of the reply
    swapped for another entity the run has seen (information misapplied)."""

    mode: str = "R.2"
    name: str = "reasoning-R.2"

    def __call__(self, context: InjectionContext) -> Injected | None:
        text = reply_text(context.reply)
        if not text or reply_tool_calls(context.reply):
            return None
        flips = [m for m in WORD.finditer(text) if m.group().lower() in _FLIPS]
        if flips:
            target = context.rng.choice(flips)
            new = _FLIPS[target.group().lower()]
            if target.group()[0].isupper():
                new = new.capitalize()
            flawed = replace_span(text, target.start(), target.end(), new)
            how = f"the comparison '{target.group()}' became '{new}'"
            return Injected(self.mode, with_message(context.reply, flawed, None), text, flawed, how)
        mine = [m for m in ENTITY.finditer(text) if m.group() not in STOP_ENTITIES]
        others = sorted(
            {m.group() for m in ENTITY.finditer(context.context) if m.group() not in STOP_ENTITIES}
            - {m.group() for m in mine}
            - set(ENTITY.findall(context.answer))
        )
        if not mine or not others:
            return None
        target = context.rng.choice(mine)
        new = context.rng.choice(others)
        flawed = text.replace(target.group(), new)
        how = f"the entity '{target.group()}' became '{new}' (another entity of the run)"
        return Injected(self.mode, with_message(context.reply, flawed, None), text, flawed, how)


_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")


@dataclass(frozen=True)
class _WithholdInjector:
    """C.2: the agent passes its turn on without the figures it had found."""

    mode: str = "C.2"
    name: str = "withhold-C.2"

    def __call__(self, context: InjectionContext) -> Injected | None:
        text = reply_text(context.reply)
        if not text or reply_tool_calls(context.reply):
            return None
        seen = values_in(context.observations)
        sentences = [s.group() for s in _SENTENCE.finditer(text) if s.group().strip()]
        kept = [s for s in sentences if not (values_in(s) & seen)]
        if len(kept) == len(sentences):
            return None
        flawed = " ".join(s.strip() for s in kept) or "I looked into it and passed it on."
        return Injected(
            self.mode,
            with_message(context.reply, flawed, None),
            text,
            flawed,
            "left out the figures it had found",
        )
