"""The model-written injector: the agents' own model rewrites a reply's text with the
flaw of a mode no deterministic injector plants, and the result is checked."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from faultfinder.injection.context import MODES, Injected, InjectionContext
from faultfinder.injection.exchanges import reply_text, reply_tool_calls, with_message
from faultfinder.injection.figures import NUMBER, values_in

__all__ = ["LLM_MODES", "MAX_GROWTH", "LLMInjector"]

_LLM_INSTRUCTIONS: dict[str, str] = {
    "R.4": "Make the message answer a slightly different question than the task asks (a"
    " different quantity, item or unit), confidently and without saying so.",
    "PL.1": "Replace the plan or next action with an unsound one that skips a step the task"
    " needs, stated confidently.",
    "PL.2": "Make the message drift away from the task: pursue a related but different goal.",
    "V.1": "Make the message forget a constraint of the task or an earlier observation, and"
    " use a value or condition that contradicts it.",
    "V.2": "Make the message claim it double-checked the result while it accepts a wrong value.",
    "C.3": "Make the message abandon its correct figure and adopt a different one, saying"
    " another agent reported it.",
    "R.1": "Make the message state a figure or fact that appears in no earlier message.",
}
"""What the model is asked to plant, per mode written by `LLMInjector`."""

LLM_MODES = tuple(_LLM_INSTRUCTIONS)

_SYSTEM = (
    "You edit one message written by an AI agent so that it contains one specific mistake,"
    " for testing a debugger of agent systems. Keep its style, length and format. Do not"
    " mention that anything was changed. Reply with the edited message only."
)


@dataclass
class LLMInjector:
    """A mode planted by a model: it rewrites the reply's text with that flaw.

    `complete(system, user)` returns the model's text (the harness passes a call to the
    agents' own model endpoint). Only text replies are rewritten; the result must differ
    from the original and must not contain the correct answer.
    """

    mode: str
    complete: Callable[[str, str], str]

    @property
    def name(self) -> str:
        return f"llm-{self.mode}"

    def __call__(self, context: InjectionContext) -> Injected | None:
        text = reply_text(context.reply)
        if not text.strip() or reply_tool_calls(context.reply):
            return None
        prompt = (
            f"The agents' task: {context.task}\n\n"
            f"The message to edit:\n<<<\n{text}\n>>>\n\n"
            f"The mistake to plant: {MODES[self.mode]}. {_LLM_INSTRUCTIONS[self.mode]}\n\n"
            "The edited message:"
        )
        flawed = _without_commentary(_strip_fences(self.complete(_SYSTEM, prompt)), text)
        if not flawed or _normalised(flawed) == _normalised(text):
            return None
        if len(flawed) > MAX_GROWTH * len(text) + 200:
            return None
        if _contains_answer(flawed, context.answer) and not _contains_answer(text, context.answer):
            return None
        return Injected(
            self.mode,
            with_message(context.reply, flawed, None),
            text,
            flawed,
            f"the model rewrote the message with a {self.mode} flaw",
            injector="llm",
        )


MAX_GROWTH = 2
"""A rewrite longer than twice the original (plus 200 characters) is refused: the edit
was to keep the message's length, and a long one is a different message."""

_COMMENTARY = re.compile(
    r"^\s*(?:here\s+is|here's|this\s+edit|the\s+edit|note\s*:|explanation\s*:|changes?\s*:"
    r"|the\s+(?:message|mistake|edited\s+message)\b|goal\s+drift\s*:"
    r"|i(?:'ve|\s+have)?\s+(?:changed|edited|replaced|introduced|modified|planted))"
    r"|\b(?:the\s+mistake|mistake\s+to\s+plant|planted|the\s+original\s+(?:message|figure|value|"
    r"information|objective)|this\s+edit(?:ed)?(?:\s+message)?)\b",
    re.IGNORECASE,
)
_PREAMBLE = re.compile(r"^\s*(?:here\s+is|here's)\b[^\n]*:\s*\n", re.IGNORECASE)


def _without_commentary(text: str, original: str = "") -> str:
    """The edited message without what the model said about its edit or echoed of the
    prompt: a leading "Here is the edited message:" line, everything after two blank
    lines (where the original has none: the small model sets its notes apart so), and
    every paragraph from the first that talks about the edit ("This edit keeps…",
    "The mistake to plant: …", "I've replaced…")."""
    text = _PREAMBLE.sub("", text.strip(), count=1)
    if not re.search(r"\n\s*\n\s*\n", original):
        text = re.split(r"\n\s*\n\s*\n", text, maxsplit=1)[0]
    kept: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        if kept and _COMMENTARY.search(paragraph):
            break
        kept.append(paragraph)
    return "\n\n".join(kept).strip()


def _strip_fences(text: str) -> str:
    text = text.strip()
    for marker in ("<<<", ">>>"):
        text = text.replace(marker, "")
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    return text


def _normalised(text: str) -> str:
    return " ".join(text.split()).casefold()


def _contains_answer(text: str, answer: str) -> bool:
    values = values_in(answer)
    if values and len(values) == 1 and len(NUMBER.findall(answer)) == 1:
        return bool(values & values_in(text))
    return bool(answer.strip()) and _normalised(answer) in _normalised(text)
