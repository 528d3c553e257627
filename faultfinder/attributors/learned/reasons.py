"""The learned attributor's reason: one or two sentences a person can act on.

A reason names the blamed step and its agent and says what the step shows (its strongest
evidence, and one more finding when another says something new). When no step shows
evidence, it says it is a guess and which of the model's features ranks the step first;
the model's full list of features goes to the attribution's details
(`model_features`), never into the reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from faultfinder.attributors.learned.evidence import Evidence

__all__ = ["evidence_reason", "model_cue", "stopped_reason"]

_NOTHING_SHOWN = "no step shows an error, a figure without support, a contradiction or a repetition"
_COMPARED = re.compile(r"^(?P<phrase>.*): (?P<value>.*) \(typical step: (?P<typical>.*)\)$")


def _sentence(text: str) -> str:
    """`text` with a capital first letter and one closing full stop."""
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?", "…")) else f"{text}."


def model_cue(item: Mapping[str, Any]) -> str:
    """One feature of the model's explanation (`StepModel.explain`) in plain words: its
    phrase in quotes, with the step's value against the run's typical step's."""
    text = str(item.get("text", ""))
    compared = _COMPARED.match(text)
    if compared is None:
        return f"“{text}”"
    return (
        f"“{compared['phrase']}” ({compared['value']} here, {compared['typical']} at a"
        " typical step of the run)"
    )


def evidence_reason(
    top: int,
    agent: str,
    evidence: Sequence[Evidence],
    guess: bool,
    explained: Sequence[Mapping[str, Any]],
) -> str:
    """Why step `top` of `agent`: its evidence, or, for a guess, what the model saw."""
    if guess:
        cue = f", chiefly for {model_cue(explained[0])}" if explained else ""
        reason = (
            f"A guess: {_NOTHING_SHOWN} of its own. The model ranks step {top} ({agent})"
            f" highest{cue}."
        )
        if evidence:
            reason += f" Its only cue: {evidence[0].text}."
        return reason
    lead = evidence[0].text
    if f"step {top}" in lead:
        reason = _sentence(lead)
    elif lead.startswith(agent):
        reason = _sentence(f"at step {top}, {lead}")
    else:
        reason = _sentence(f"step {top} ({agent}): {lead}")
    # The same finding can reach a step twice (from two rules, or worded within another):
    # the second sentence is the first finding that says something the lead does not.
    also = next((e.text for e in evidence[1:] if e.text not in lead and lead not in e.text), None)
    if also is not None:
        reason += f" Also, {also.rstrip('.')}."
    return reason


def stopped_reason(top: int, agent: str) -> str:
    """Why the last acting step of a run that never finished, when no step shows evidence."""
    return (
        f"The run never finished: its work stopped after step {top} ({agent}) and its root"
        f" span never arrived (the process crashed, was killed or hung). Besides, {_NOTHING_SHOWN}."
    )
