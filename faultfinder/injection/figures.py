"""Figures and names in text, as the deterministic injectors change them: the figures a
text states, a figure written like another, a made-up figure, a calculation slip, and
the names (capitalised words) a run mentions."""

from __future__ import annotations

import random
import re

NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])")


def figure_value(token: str) -> float | None:
    try:
        return float(token.replace(",", ""))
    except ValueError:
        return None


def values_in(text: str) -> set[float]:
    return {v for v in (figure_value(t) for t in NUMBER.findall(text)) if v is not None}


def format_like(value: float, token: str) -> str:
    """`value` written the way `token` was (thousands commas, decimals)."""
    decimals = len(token.split(".", 1)[1]) if "." in token else 0
    if decimals == 0:
        value = round(value)
    text = f"{value:,.{decimals}f}" if "," in token else f"{value:.{decimals}f}"
    return text


def figures_of_answer(answer: str) -> set[float]:
    return values_in(answer)


def replace_span(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def number_tokens(text: str) -> list[re.Match[str]]:
    # Years, list markers and one-digit counts are rarely the value an answer rests on.
    out = []
    for match in NUMBER.finditer(text):
        value = figure_value(match.group())
        if value is None or (abs(value) < 10 and "." not in match.group()):
            continue
        out.append(match)
    return out


def fabricated(value: float, token: str, rng: random.Random, avoid: set[float]) -> str | None:
    """A value of the same kind that no observation holds (a hallucinated figure)."""
    for _ in range(20):
        factor = rng.choice((0.3, 0.45, 0.6, 1.4, 1.75, 2.2, 3.1))
        candidate = value * factor
        if "." not in token and abs(candidate) >= 100:
            magnitude = 10 ** max(0, len(str(int(abs(candidate)))) - 3)
            candidate = (
                round(candidate / magnitude) * magnitude + rng.randint(1, 9) * magnitude / 10
            )
        text = format_like(candidate, token)
        got = figure_value(text)
        if got is not None and got not in avoid and got != value:
            return text
    return None


def slipped(value: float, token: str, rng: random.Random, avoid: set[float]) -> str | None:
    """A calculation slip: a digit off, a wrong carry, a factor of ten, a rounding."""
    decimals = len(token.split(".", 1)[1]) if "." in token else 0
    unit = 10**-decimals
    digits = len(str(int(abs(value)))) if abs(value) >= 1 else 1
    choices = [
        value + rng.choice((-1, 1)) * unit * rng.randint(1, 9),
        value + rng.choice((-1, 1)) * 10 ** max(0, digits - 2),
        value * 10,
        value / 10 if decimals or value % 10 == 0 else value * 100,
    ]
    rng.shuffle(choices)
    for candidate in choices:
        text = format_like(candidate, token)
        got = figure_value(text)
        if got is not None and got not in avoid and got != value:
            return text
    return None


WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")
ENTITY = re.compile(r"\b[A-Z][a-z]{2,}(?:\s[A-Z][a-z]{2,})?\b")
STOP_ENTITIES = frozenset({
    "The", "This", "That", "These", "Those", "What", "Which", "When", "Where", "Who",
    "Here", "There", "Then", "Thus", "Final", "Answer", "Let", "Now", "First", "Next",
    "Based", "According", "Since", "Step", "Result", "Please", "Sure", "Yes", "Okay",
    "Task", "Tool", "Agent", "User", "Assistant", "However", "Therefore", "So", "And",
})  # fmt: skip
