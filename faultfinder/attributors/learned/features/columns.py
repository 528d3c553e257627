"""The columns of the learned scorer's feature matrix and how a reader sees each one.

`FEATURES` (and its prefix-safe part `PREFIX_FEATURES`) is the order of a row of
`step_features`: what the step shows itself (`STEP_FEATURES`), then, for each of those,
its highest value at the steps before it and at the steps after it (`CONTEXT_FEATURES`),
which let a model compare a step with the rest of its run. `FEATURE_LABELS` phrases each
column for the evidence of an attribution.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CONTEXT_FEATURES",
    "CONTEXT_FLAG_NEGATIONS",
    "FEATURES",
    "FEATURE_LABELS",
    "PREFIX_FEATURES",
    "STEP_FEATURES",
    "Feature",
    "feature_names",
]


@dataclass(frozen=True)
class Feature:
    """One column of the feature matrix."""

    name: str
    doc: str
    prefix_safe: bool
    """True when the value for step i depends only on steps 0..i (and the task and
    ground truth), so that the online auditor may use it while the run streams in."""


STEP_FEATURES: tuple[Feature, ...] = (
    Feature("position", "0-based index of the step.", True),
    Feature("log_position", "log(1 + index).", True),
    Feature("relative_position", "index / (n - 1); 0 for a one-step run.", False),
    Feature("log_steps_total", "log(1 + number of steps in the run).", False),
    Feature("log_steps_to_end", "log(1 + steps after this one).", False),
    Feature(
        "is_acting", "An agent decided this step (message/llm/handoff of a non-tool agent).", True
    ),
    Feature("kind_message", "Step kind is message.", True),
    Feature("kind_tool", "Step kind is tool (tool or terminal output).", True),
    Feature("kind_handoff", "Step kind is handoff, or the step names the next speaker.", True),
    Feature("kind_human", "Step kind is human.", True),
    Feature("kind_other", "Step kind is llm or system.", True),
    Feature("acting_rank", "Acting steps before this one.", True),
    Feature("is_first_acting", "This is the run's first acting step.", True),
    Feature("agent_turn", "Earlier steps by the same agent.", True),
    Feature("agent_first_turn", "No earlier step by the same agent.", True),
    Feature("agent_last_turn", "No later step by the same agent.", False),
    Feature("agents_before", "Distinct agents seen before this step.", True),
    Feature("agent_is_first_speaker", "Same agent as the run's first acting step.", True),
    Feature("error_in_step", "Strongest error signal in the step (0 when none).", True),
    Feature(
        "error_in_previous", "Strongest error signal in the step just before (the input).", True
    ),
    Feature(
        "error_after",
        "Strongest error signal in the tool/terminal/human outputs that follow the step "
        "until the next acting step (the results this step is answerable for).",
        False,
    ),
    Feature(
        "first_error_blame",
        "The step is the one the first-error rule blames: the acting step answerable "
        "for the run's first error signal.",
        False,
    ),
    Feature("errors_before", "log(1 + earlier steps that show an error signal).", True),
    Feature("first_error_here", "The step shows an error signal and no earlier step does.", True),
    Feature(
        "repetition",
        "Highest token-set Jaccard similarity to one of the agent's last 5 earlier steps.",
        True,
    ),
    Feature(
        "loop_count",
        "log(1 + of the agent's last 20 earlier steps, those with Jaccard similarity >= 0.8).",
        True,
    ),
    Feature("log_length", "log(1 + characters of content).", True),
    Feature(
        "length_vs_agent",
        "log of content length over the mean length of the agent's earlier steps (0 if none).",
        True,
    ),
    Feature("code_blocks", "Number of fenced code blocks in the step.", True),
    Feature("task_overlap", "Share of the task's distinct words that occur in the step.", True),
    Feature(
        "new_numbers",
        "log(1 + numbers in the step that neither the task nor an earlier step contains).",
        True,
    ),
    Feature(
        "new_words",
        "Share of the step's distinct words that neither the task nor an earlier step contains.",
        True,
    ),
    Feature(
        "hedging",
        "The step assumes, simulates or invents data (assume, hypothetical, placeholder, "
        "mock, sample data, for demonstration…).",
        True,
    ),
    Feature("apology", "The step apologises or gives up (sorry, unfortunately, I cannot…).", True),
    Feature("verification", "The step claims to verify or confirm something.", True),
    Feature("terminates", "The step contains TERMINATE or a final answer marker.", True),
    Feature(
        "ledger_stalled_before",
        "The latest progress ledger before the step says the run is in a loop or not "
        "making progress.",
        True,
    ),
    Feature(
        "ledger_stalled_after",
        "The first progress ledger after the step (before the agent speaks again) says the "
        "run is in a loop or not making progress.",
        False,
    ),
    Feature(
        "answers_handoff",
        "The previous handoff named this step's agent as the next speaker.",
        True,
    ),
    Feature(
        "instruction_overlap",
        "Share of the words of the latest handoff (instruction) to this agent that the step "
        "repeats; 0 when no handoff named the agent.",
        True,
    ),
    Feature(
        "criticised_next",
        "The next acting step by another agent criticises (incorrect, mistake, error, wrong, "
        "issue, not accurate, did not…).",
        False,
    ),
    Feature(
        "gt_mentioned",
        "The step contains the ground-truth answer (0 without ground truth).",
        True,
    ),
    Feature(
        "gt_mentioned_before",
        "An earlier step contains the ground-truth answer (0 without ground truth).",
        True,
    ),
    Feature(
        "numbers_contradict_gt",
        "The ground truth is a number and the step states numbers none of which equal it "
        "(numbers quoted from the task excluded; 0 without ground truth).",
        True,
    ),
    Feature(
        "first_numbers_contradict_gt",
        "numbers_contradict_gt holds here and at no earlier step.",
        True,
    ),
    Feature(
        "contradiction_after",
        "numbers_contradict_gt holds in a tool/terminal/human output this step is answerable "
        "for (0 without ground truth).",
        False,
    ),
    Feature(
        "unsupported_values",
        "log(1 + figures the agent step states that no earlier observation (task, user,"
        " system, tool report) holds or derives by one arithmetic step or unit conversion).",
        True,
    ),
    Feature(
        "introduces_unsupported",
        "The step states an unsupported figure that no earlier step stated.",
        True,
    ),
    Feature(
        "contradicts_report",
        "The step answers what it was just given (a tool's report since the agent last acted,"
        " else the other agent's message just before) with a figure of its own, repeating"
        " none of the figures it was given.",
        True,
    ),
    Feature(
        "unsupported_argument",
        "The step shows a tool call whose argument names something (an id, a code, a proper"
        " name) that no earlier observation names.",
        True,
    ),
    Feature(
        "argument_outside_task",
        "The step shows a tool call whose argument names something the task does not.",
        True,
    ),
    Feature(
        "final_answer_first_claim",
        "The step is the first agent step to state the run's final answer (when it differs"
        " from the ground truth, with ground truth allowed).",
        False,
    ),
    Feature(
        "final_value_origin",
        "The step is the first to state the run's final answer, and nothing observed before"
        " it supports that answer (and it differs from the ground truth when allowed).",
        False,
    ),
    Feature(
        "agent_directs",
        "The step's agent has handed off to another agent at this step or earlier.",
        True,
    ),
    Feature(
        "final_answer_first_mention",
        "The step is the first to contain the run's final answer (trajectory.final_answer or "
        "the last 'FINAL ANSWER:' line; its last figure, or its words when it is short), and "
        "that answer differs from the ground truth when ground truth is allowed.",
        False,
    ),
    Feature("agent_share", "Share of the run's steps taken by the step's agent.", False),
    Feature(
        "agent_error_share",
        "Share of the run's error-showing steps that the step's agent is answerable for.",
        False,
    ),
    Feature("agent_acting_turns", "log(1 + acting steps of the step's agent in the run).", False),
)

"""What each step shows by itself and about its place in the run."""

_BEFORE = "_max_before"
_AFTER = "_max_after"

CONTEXT_FEATURES: tuple[Feature, ...] = tuple(
    Feature(
        f"{f.name}{_BEFORE}",
        f"Highest `{f.name}` among the steps before this one (0 at the first step).",
        f.prefix_safe,
    )
    for f in STEP_FEATURES
) + tuple(
    Feature(
        f"{f.name}{_AFTER}",
        f"Highest `{f.name}` among the steps after this one (0 at the last step).",
        False,
    )
    for f in STEP_FEATURES
)
"""Each step feature's highest value before and after the step. A linear scorer sees
only one step's row at a time; these columns let it weigh, say, an error signal here
against a stronger one earlier in the run."""

FEATURES: tuple[Feature, ...] = STEP_FEATURES + CONTEXT_FEATURES

PREFIX_FEATURES: tuple[Feature, ...] = tuple(f for f in FEATURES if f.prefix_safe)

FEATURE_LABELS: dict[str, tuple[str, str]] = {
    "position": ("step number", "int"),
    "log_position": ("step number", "log1p"),
    "relative_position": ("how far into the run", "share"),
    "log_steps_total": ("steps in the run", "log1p"),
    "log_steps_to_end": ("steps after it", "log1p"),
    "is_acting": ("an agent's own decision", "flag"),
    "kind_message": ("a message", "flag"),
    "kind_tool": ("a tool's or terminal's output", "flag"),
    "kind_handoff": ("a handoff to another agent", "flag"),
    "kind_human": ("the task giver's turn", "flag"),
    "kind_other": ("an LLM call or system step", "flag"),
    "acting_rank": ("agent decisions before it", "int"),
    "is_first_acting": ("the run's first agent decision", "flag"),
    "agent_turn": ("earlier steps by the same agent", "int"),
    "agent_first_turn": ("the agent's first turn", "flag"),
    "agent_last_turn": ("the agent's last turn", "flag"),
    "agents_before": ("agents seen before it", "int"),
    "agent_is_first_speaker": ("by the run's first speaker", "flag"),
    "error_in_step": ("error signal in the step", "strength"),
    "error_in_previous": ("error signal in the step before", "strength"),
    "error_after": ("error signal in the outputs it answers for", "strength"),
    "first_error_blame": ("the step first_error blames", "flag"),
    "errors_before": ("earlier steps showing an error", "log1p"),
    "first_error_here": ("the run's first error signal", "flag"),
    "repetition": ("similarity to the agent's recent steps", "share"),
    "loop_count": ("near-repeats among the agent's recent steps", "log1p"),
    "log_length": ("characters", "log1p"),
    "length_vs_agent": ("length against the agent's earlier steps", "ratio"),
    "code_blocks": ("code blocks", "int"),
    "task_overlap": ("share of the task's words it uses", "share"),
    "new_numbers": ("numbers not seen earlier in the run", "log1p"),
    "new_words": ("share of words not seen earlier", "share"),
    "hedging": ("assumes, simulates or invents data", "flag"),
    "apology": ("apologises or gives up", "flag"),
    "verification": ("claims to verify or confirm", "flag"),
    "terminates": ("ends the run or gives a final answer", "flag"),
    "ledger_stalled_before": ("a progress ledger before it reports a stall", "flag"),
    "ledger_stalled_after": ("the progress ledger after it reports a stall", "flag"),
    "answers_handoff": ("answers a handoff addressed to its agent", "flag"),
    "instruction_overlap": ("share of its instruction it repeats", "share"),
    "criticised_next": ("criticised by the next agent", "flag"),
    "gt_mentioned": ("contains the correct answer", "flag"),
    "gt_mentioned_before": ("the correct answer appeared earlier", "flag"),
    "numbers_contradict_gt": ("states numbers that contradict the correct answer", "flag"),
    "first_numbers_contradict_gt": (
        "first step whose numbers contradict the correct answer",
        "flag",
    ),
    "contradiction_after": ("an output it answers for contradicts the correct answer", "flag"),
    "unsupported_values": ("figures no observation supports", "log1p"),
    "introduces_unsupported": ("first to state an unsupported figure", "flag"),
    "contradicts_report": ("contradicts the figures it was just given", "flag"),
    "unsupported_argument": ("calls a tool with a name nothing observed gives", "flag"),
    "final_value_origin": ("origin of the unsupported final answer", "flag"),
    "argument_outside_task": ("calls a tool with a name the task does not give", "flag"),
    "final_answer_first_claim": ("first agent to state the final answer", "flag"),
    "agent_directs": ("its agent directs others", "flag"),
    "final_answer_first_mention": ("first mention of the wrong final answer", "flag"),
    "agent_share": ("its agent's share of the steps", "share"),
    "agent_error_share": ("its agent's share of the errors", "share"),
    "agent_acting_turns": ("its agent's decisions in the run", "log1p"),
}
"""Each feature as a reader sees it: a short phrase and how its value is shown (`flag`:
yes/no; `int`; `log1p`: a count stored as log(1 + n); `share`: a percentage;
`strength`: an error-signal strength 0–1; `ratio`: a ratio stored as its log). A context
column reads as its step feature's phrase at an earlier or a later step: a flag's as
"at an earlier step: …" (see `CONTEXT_FLAG_NEGATIONS`), another's as "…, highest at an
earlier step"."""

CONTEXT_FLAG_NEGATIONS: dict[str, str] = {
    "at an earlier step: ": "at no earlier step: ",
    "at a later step: ": "at no later step: ",
}
"""The opening of a context flag's phrase, and what it becomes when the flag is not set."""

for _name, (_phrase, _shown) in list(FEATURE_LABELS.items()):
    for _suffix, _opening in zip((_BEFORE, _AFTER), CONTEXT_FLAG_NEGATIONS, strict=True):
        FEATURE_LABELS[f"{_name}{_suffix}"] = (
            f"{_opening}{_phrase}"
            if _shown == "flag"
            else f"{_phrase}, highest {_opening.rstrip(': ')}",
            _shown,
        )


def feature_names(prefix_only: bool = False) -> tuple[str, ...]:
    """Column names of `step_features(..., prefix_only=prefix_only)`."""
    return tuple(f.name for f in (PREFIX_FEATURES if prefix_only else FEATURES))
