"""Injectors: turn a recorded model reply into a flawed one of a given error mode.

The modes are the text modes of the Who&When Pro taxonomy (INJECTION.md). Where a flaw
can be made exactly, a deterministic injector makes it (a number relayed from a tool
changed to one no observation holds, a calculation slip, a comparison reversed or an
entity swapped, a tool argument changed, a premature answer, a repeated call, a handoff
to the wrong agent, information withheld). The others are written by a model asked to
rewrite the reply with that flaw (`LLMInjector`), and checked: the result must differ from
the original, keep valid tool calls, and not contain the correct answer.
"""

from __future__ import annotations

from faultfinder.injection.call_injectors import (
    _ArgumentInjector,
    _DelegationInjector,
    _PrematureInjector,
    _RepeatInjector,
)
from faultfinder.injection.context import (
    MODES,
    Injected,
    InjectionContext,
    Injector,
    eligible_calls,
    shown_reply,
)
from faultfinder.injection.llm_injector import LLM_MODES, LLMInjector
from faultfinder.injection.text_injectors import (
    _NumberInjector,
    _ReasoningInjector,
    _WithholdInjector,
)

__all__ = [
    "DETERMINISTIC_MODES",
    "LLM_MODES",
    "MODES",
    "Injected",
    "InjectionContext",
    "Injector",
    "LLMInjector",
    "deterministic_injectors",
    "eligible_calls",
    "shown_reply",
]


def deterministic_injectors() -> list[Injector]:
    """One deterministic injector per mode that can be planted exactly."""
    return [
        _NumberInjector("R.1"),
        _ReasoningInjector(),
        _NumberInjector("R.3"),
        _ArgumentInjector(),
        _PrematureInjector(),
        _RepeatInjector(),
        _DelegationInjector(),
        _WithholdInjector(),
    ]


DETERMINISTIC_MODES = tuple(injector.mode for injector in deterministic_injectors())
