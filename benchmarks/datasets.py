"""Benchmark dataset loaders: each record becomes a `Trajectory` plus its gold label.

The field-by-field mapping of every dataset is documented in docs/datasets.md.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faultfinder.attributors.model import Step, StepKind, StepStatus, Trajectory

DATASETS_DIR_ENV = "FAULTFINDER_DATASETS_DIR"

# Magentic-One's fixed team, as its agents are named in the Hand-Crafted logs (the
# Coder speaks as "Assistant"). Algorithm-Generated teams are built per task, so
# their roster is the agents that appear in the run.
MAGENTIC_ONE_ROSTER = ("Orchestrator", "WebSurfer", "FileSurfer", "Assistant", "ComputerTerminal")

WHO_AND_WHEN = "who_and_when"
WHO_AND_WHEN_PRO = "who_and_when_pro"

DATASET_SPECS: tuple[str, ...] = (
    WHO_AND_WHEN,
    f"{WHO_AND_WHEN}:algorithm-generated",
    f"{WHO_AND_WHEN}:hand-crafted",
    WHO_AND_WHEN_PRO,
)
"""Every spec `load_dataset` accepts."""


class DatasetError(ValueError):
    """A dataset file is missing or malformed; the message names the file and the field."""


@dataclass(frozen=True)
class GoldLabel:
    """The labelled culprit of a failed run."""

    agent: str
    step: int
    """0-based index into the trajectory's steps."""
    reason: str = ""
    mode: str | None = None
    """Error-mode code or category when the dataset has one."""


@dataclass(frozen=True)
class BenchmarkRecord:
    """One labelled failed run."""

    dataset: str
    """e.g. `who_and_when`, `who_and_when_pro`."""
    subset: str
    """e.g. `algorithm-generated`, `hand-crafted`, or the Pro framework name."""
    record_id: str
    """Unique within the dataset, e.g. `algorithm-generated/1`."""
    trajectory: Trajectory
    gold: GoldLabel


def default_datasets_dir() -> Path:
    """`../shared/datasets` beside the checkout (or the working directory)."""
    here = Path(__file__).resolve().parent.parent
    for base in (Path.cwd(), here):
        candidate = base.parent / "shared" / "datasets"
        if candidate.is_dir():
            return candidate
    return Path.cwd().parent / "shared" / "datasets"


def resolve_datasets_dir(value: str | os.PathLike[str] | None = None) -> Path:
    """The dataset root: the argument, else $FAULTFINDER_DATASETS_DIR, else the default."""
    if value:
        return Path(value)
    env = os.environ.get(DATASETS_DIR_ENV)
    return Path(env) if env else default_datasets_dir()


# ---------------------------------------------------------------------------------------------
# Specs and files
# ---------------------------------------------------------------------------------------------

_WHO_AND_WHEN_FOLDERS = {
    "algorithm-generated": "Algorithm-Generated",
    "hand-crafted": "Hand-Crafted",
}
_PRO_TRACES = Path(WHO_AND_WHEN_PRO) / "data" / "traces"


@dataclass(frozen=True)
class _RecordFile:
    path: Path
    load: Callable[[Path], BenchmarkRecord]


def load_dataset(
    spec: str, root: str | os.PathLike[str] | None = None
) -> Iterator[BenchmarkRecord]:
    """Records of `spec`: `who_and_when`, `who_and_when:algorithm-generated`,
    `who_and_when:hand-crafted`, `who_and_when_pro`.

    The spec and the dataset folders are checked at call time; each file is read and
    validated as the iterator reaches it.
    """
    files = _record_files(spec, root)
    return (record_file.load(record_file.path) for record_file in files)


def count_records(spec: str, root: str | os.PathLike[str] | None = None) -> int:
    """How many records `load_dataset(spec, root)` yields, without reading them."""
    return len(_record_files(spec, root))


def _record_files(spec: str, root: str | os.PathLike[str] | None) -> list[_RecordFile]:
    base = resolve_datasets_dir(root)
    name, _, subset = spec.strip().lower().partition(":")
    if name == WHO_AND_WHEN and (not subset or subset in _WHO_AND_WHEN_FOLDERS):
        subsets = [subset] if subset else list(_WHO_AND_WHEN_FOLDERS)
        files: list[_RecordFile] = []
        for each in subsets:
            folder = base / WHO_AND_WHEN / _WHO_AND_WHEN_FOLDERS[each]
            files.extend(
                _RecordFile(path, _who_and_when_loader(each))
                for path in sorted(_json_files(folder), key=_record_number)
            )
        return files
    if name == WHO_AND_WHEN_PRO and not subset:
        folder = base / _PRO_TRACES
        return [_RecordFile(path, load_who_and_when_pro_record) for path in _json_files(folder)]
    raise DatasetError(f"unknown dataset spec {spec!r}; valid specs: {', '.join(DATASET_SPECS)}")


def _who_and_when_loader(subset: str) -> Callable[[Path], BenchmarkRecord]:
    return lambda path: load_who_and_when_record(path, subset)


def _json_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise DatasetError(
            f"{folder}: dataset folder not found (pass the datasets root or set {DATASETS_DIR_ENV})"
        )
    return sorted(path for path in folder.glob("*.json") if path.is_file())


def _record_number(path: Path) -> int:
    if not path.stem.isdigit():
        raise DatasetError(f"{path}: file name must be a record number such as 12.json")
    return int(path.stem)


# ---------------------------------------------------------------------------------------------
# Typed access to parsed JSON, with errors that name the file and the field
# ---------------------------------------------------------------------------------------------


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DatasetError(f"{path}: file not found") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read file: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text ({exc.reason})") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: must hold a JSON object, got {_type_name(data)}")
    return data


def _type_name(value: Any) -> str:
    names = {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class _Fields:
    """A JSON object plus the file and field path it came from."""

    path: Path
    data: Mapping[str, Any]
    prefix: str = ""

    def error(self, name: str, problem: str) -> DatasetError:
        return DatasetError(f"{self.path}: field '{self.prefix}{name}' {problem}")

    def has(self, name: str) -> bool:
        return self.data.get(name) is not None

    def _require(self, name: str) -> Any:
        if name not in self.data:
            raise self.error(name, "is missing")
        return self.data[name]

    def string(self, name: str, *, non_empty: bool = False) -> str:
        value = self._require(name)
        if not isinstance(value, str):
            raise self.error(name, f"must be a string, got {_type_name(value)}")
        if non_empty and not value.strip():
            raise self.error(name, "must be a non-empty string")
        return value

    def optional_string(self, name: str) -> str | None:
        return self.string(name) if self.has(name) else None

    def text(self, name: str) -> str:
        """A string, or a number written as one (answers are sometimes numbers)."""
        value = self._require(name)
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise self.error(name, f"must be a string, got {_type_name(value)}")

    def integer(self, name: str) -> int:
        """An integer, also accepted as a string of digits."""
        value = self._require(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().isdigit():
            return int(value.strip())
        raise self.error(name, f"must be an integer, got {_shown(value)}")

    def integer_string(self, name: str) -> int:
        value = self._require(name)
        if isinstance(value, str) and value.strip().isdigit():
            return int(value.strip())
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        raise self.error(name, f"must be an integer string, got {_shown(value)}")

    def items(self, name: str) -> list[Any]:
        value = self._require(name)
        if not isinstance(value, list):
            raise self.error(name, f"must be a list, got {_type_name(value)}")
        return value

    def mapping(self, name: str) -> _Fields:
        value = self._require(name)
        if not isinstance(value, dict):
            raise self.error(name, f"must be an object, got {_type_name(value)}")
        return _Fields(self.path, value, f"{self.prefix}{name}.")

    def mappings(self, name: str) -> list[_Fields]:
        items: list[_Fields] = []
        for position, value in enumerate(self.items(name)):
            where = f"{name}[{position}]"
            if not isinstance(value, dict):
                raise self.error(where, f"must be an object, got {_type_name(value)}")
            items.append(_Fields(self.path, value, f"{self.prefix}{where}."))
        return items


def _check_step_in_range(fields: _Fields, name: str, step: int, length: int, of: str) -> None:
    if not 0 <= step < length:
        raise fields.error(name, f"is step {step}, outside {of} (0..{length - 1})")


# ---------------------------------------------------------------------------------------------
# Who&When
# ---------------------------------------------------------------------------------------------

_TERMINAL_AGENTS = frozenset({"Computer_terminal", "ComputerTerminal"})
_HUMAN_AGENT = "human"
# Hand-Crafted roles carry a parenthesised note: "Orchestrator (thought)",
# "Orchestrator (-> WebSurfer)", "Orchestrator (termination condition)".
_ROLE_NOTE = re.compile(r"^(?P<agent>.*?)\s*\((?P<note>[^()]*)\)\s*$")


def load_who_and_when_record(path: Path, subset: str) -> BenchmarkRecord:
    """One Who&When file; `subset` is `algorithm-generated` or `hand-crafted`."""
    if subset not in _WHO_AND_WHEN_FOLDERS:
        raise DatasetError(
            f"{path}: unknown Who&When subset {subset!r}; "
            f"valid subsets: {', '.join(_WHO_AND_WHEN_FOLDERS)}"
        )
    record_id = f"{subset}/{_record_number(path)}"
    fields = _Fields(path, _read_json_object(path))
    hand_crafted = subset == "hand-crafted"

    steps = [
        _who_and_when_step(index, entry, hand_crafted)
        for index, entry in enumerate(fields.mappings("history"))
    ]
    gold_step = fields.integer_string("mistake_step")
    _check_step_in_range(fields, "mistake_step", gold_step, len(steps), "'history'")
    mode_field = "mistake_type" if hand_crafted else "labels"
    gold = GoldLabel(
        agent=fields.string("mistake_agent", non_empty=True),
        step=gold_step,
        reason=fields.string("mistake_reason"),
        mode=fields.optional_string(mode_field),
    )
    level = fields.data.get("level")
    if level is not None and (isinstance(level, bool) or not isinstance(level, str | int)):
        raise fields.error("level", f"must be a string or an integer, got {_type_name(level)}")
    trajectory = Trajectory(
        run_id=f"{WHO_AND_WHEN}/{record_id}",
        task=fields.string("question"),
        ground_truth=fields.text("ground_truth"),
        steps=tuple(steps),
        metadata={
            "dataset": WHO_AND_WHEN,
            "subset": subset,
            "record": record_id,
            "question_id": fields.string("question_ID"),
            "level": level,
            "framework": "magentic-one" if hand_crafted else "ag2",
            **({"roster": list(MAGENTIC_ONE_ROSTER)} if hand_crafted else {}),
        },
    )
    return BenchmarkRecord(WHO_AND_WHEN, subset, record_id, trajectory, gold)


def _who_and_when_step(index: int, entry: _Fields, hand_crafted: bool) -> Step:
    content = entry.string("content")
    role = entry.string("role", non_empty=hand_crafted)
    handoff_to: str | None = None
    if hand_crafted:
        agent, note = _split_role(role)
        if note is not None and note.startswith("->"):
            handoff_to = note[2:].strip()
    else:
        agent = entry.string("name", non_empty=True)

    if handoff_to:
        kind = StepKind.HANDOFF
    elif agent in _TERMINAL_AGENTS:
        kind = StepKind.TOOL
    elif agent == _HUMAN_AGENT:
        kind = StepKind.HUMAN
    else:
        kind = StepKind.MESSAGE
    return Step(
        index=index,
        agent=agent,
        kind=kind,
        content=content,
        role=role,
        metadata={"handoff_to": handoff_to} if handoff_to else {},
    )


def _split_role(role: str) -> tuple[str, str | None]:
    """`"Orchestrator (-> WebSurfer)"` → (`"Orchestrator"`, `"-> WebSurfer"`)."""
    match = _ROLE_NOTE.match(role)
    if match and match["agent"]:
        return match["agent"], match["note"].strip()
    return role.strip(), None


# ---------------------------------------------------------------------------------------------
# Who&When Pro
# ---------------------------------------------------------------------------------------------

_SINGLE_AGENT_NAME = "agent"
_NOT_TEAM_KINDS = frozenset({StepKind.HUMAN, StepKind.SYSTEM, StepKind.TOOL})
"""What the Pro scorer compares single-agent predictions against."""

_PRO_FRAMEWORKS = frozenset(
    {"smolagents", "alfagent", "eva", "dvd", "magentic-one", "macnet", "mathchat", "metagpt",
     "pixelcraft"}
)  # fmt: skip
_ROUND_ONLY_FRAMEWORKS = frozenset({"debate", "dylan"})

# Element kinds played by something other than an agent, and the actor we name for them.
_FRAMING_ACTORS = {"user": "user", "system": "system", "final_answer": "system"}
_FRAMING_KINDS = {"user": StepKind.HUMAN, "system": StepKind.SYSTEM}

# Steps copy only the fields named in `_pro_step`: the markers of the injected fault
# (`injected`, `is_injected`, `is_replayed`, `phase`) would hand an attributor the answer.


@dataclass(frozen=True)
class _ProElement:
    """One trajectory element (or one turn of a round-wrapped element)."""

    fields: _Fields
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


def load_who_and_when_pro_record(path: Path) -> BenchmarkRecord:
    """One Who&When Pro trace (the release's per-trace JSON object)."""
    fields = _Fields(path, _read_json_object(path))
    framework = fields.string("framework", non_empty=True)
    if framework in _ROUND_ONLY_FRAMEWORKS:
        raise fields.error(
            "framework",
            f"{framework!r} is unsupported: its gold label names a round, not a single step",
        )
    if framework not in _PRO_FRAMEWORKS:
        raise fields.error(
            "framework",
            f"{framework!r} is unsupported; supported: {', '.join(sorted(_PRO_FRAMEWORKS))}",
        )
    gold_fields = fields.mapping("ground_truth")
    single_agent = not gold_fields.has("agent") and not gold_fields.has("agents")
    elements = _pro_elements(fields)
    # Magentic-One's ledger names the next speaker by role ("WebSurfer"); steps use ids.
    agent_by_role = {
        agent["role"]: agent["id"]
        for agent in fields.data.get("agents") or []
        if isinstance(agent, dict)
        and isinstance(agent.get("role"), str)
        and isinstance(agent.get("id"), str)
    }
    steps = [
        _pro_step(index, element, framework, single_agent, agent_by_role)
        for index, element in enumerate(elements)
    ]
    gold_step = _pro_gold_step(framework, gold_fields, elements, fields)
    mode = gold_fields.optional_string("mode")
    gold = GoldLabel(
        agent=_SINGLE_AGENT_NAME if single_agent else gold_fields.string("agent", non_empty=True),
        step=gold_step,
        reason=gold_fields.optional_string("reason") or "",
        mode=mode,
    )

    # The system's team: the declared agents and whoever acts in the run; never the user,
    # the system prompt or a tool reply (the release never blames those). Single-agent
    # frameworks have the one literal agent the release scores against.
    declared = [
        agent["id"]
        for agent in fields.data.get("agents") or []
        if isinstance(agent, dict) and isinstance(agent.get("id"), str) and agent["id"]
    ]
    acting = [step.agent for step in steps if step.kind not in _NOT_TEAM_KINDS]
    roster = list(dict.fromkeys([*declared, *acting]))
    task = fields.mapping("task")
    record_id = f"{framework}/{path.stem}"
    trajectory = Trajectory(
        run_id=f"{WHO_AND_WHEN_PRO}/{record_id}",
        task=_pro_task_text(task),
        ground_truth=task.text("answer") if task.has("answer") else None,
        final_answer=_pro_final_answer(fields, elements),
        steps=tuple(steps),
        metadata={
            "dataset": WHO_AND_WHEN_PRO,
            "subset": framework,
            "record": record_id,
            "framework": framework,
            "benchmark": fields.optional_string("benchmark"),
            "modality": fields.optional_string("modality"),
            "agents": [
                {"id": agent.get("id"), "role": agent.get("role")}
                for agent in fields.data.get("agents") or []
                if isinstance(agent, dict)
            ],
            **({"roster": roster} if roster else {}),
        },
    )
    return BenchmarkRecord(WHO_AND_WHEN_PRO, framework, record_id, trajectory, gold)


def _pro_elements(fields: _Fields) -> list[_ProElement]:
    elements: list[_ProElement] = []
    for source, element in enumerate(fields.mappings("trajectory")):
        if element.data.get("kind") == "round":
            # Round-wrapped frameworks (pixelcraft) nest one turn per agent; each turn is a
            # step, since the gold label points at a turn inside the round.
            round_number = element.integer("round")
            elements.extend(
                _ProElement(turn, source, round_number) for turn in element.mappings("turns")
            )
        else:
            elements.append(_ProElement(element, source))
    return elements


def _pro_step(
    index: int,
    element: _ProElement,
    framework: str,
    single_agent: bool,
    agent_by_role: Mapping[str, str],
) -> Step:
    fields = element.fields
    kind = element.kind
    tool_name: str | None = None
    tool_arguments: str | None = None
    tool_result: str | None = None
    error: str | None = None
    metadata: dict[str, Any] = {
        name: element.get(name)
        for name in ("round", "position", "stage", "step_number")
        if element.get(name) is not None
    }
    if element.round is not None:
        metadata["round"] = element.round
    if kind is not None:
        metadata["element_kind"] = kind
    images = _image_paths(element)
    if images:
        metadata["images"] = images

    if kind in _FRAMING_ACTORS:
        agent = _FRAMING_ACTORS[kind]
        step_kind = _FRAMING_KINDS.get(kind, StepKind.SYSTEM)
        content = fields.text("content")
    elif kind == "tool":
        tool_name = fields.optional_string("tool_name")
        content = fields.text("content")
        tool_result = content
        # DVD's frame inspector is a VLM that answers the orchestrator: a sub-agent.
        agent = (
            "frame_inspect_agent"
            if framework == "dvd" and tool_name == "frame_inspect_tool"
            else "tool"
        )
        step_kind = StepKind.TOOL
    else:
        agent = _pro_agent(element, framework, single_agent)
        step_kind = StepKind.MESSAGE
        sections: list[tuple[str, str]] = []
        if kind == "planning":
            sections.append(("", _optional_text(fields, "plan")))
        elif kind == "action":
            reasoning = _optional_text(fields, "reasoning")
            code = _optional_text(fields, "code")
            action = _optional_text(fields, "action")
            observation = _optional_text(fields, "observation")
            sections.append(("", reasoning))
            if code and code.strip() not in reasoning:
                sections.append(("Code", code))
            sections.append(("Action", action))
            sections.append(("Observation", observation))
            if code:
                # smolagents' CodeAgent records each code action as a call to this tool.
                tool_name, tool_arguments = "python_interpreter", code
            elif action:
                tool_arguments = action
            tool_result = observation or None
            if element.get("error") is not None:
                error = _as_text(element.get("error"))
                sections.append(("Error", error))
        else:
            sections.append(
                ("", _optional_text(fields, "content") or _optional_text(fields, "output"))
            )
        calls = element.get("tool_calls")
        if isinstance(calls, list) and calls:
            sections.extend(("Tool call", _describe_call(call)) for call in calls)
            first = calls[0] if isinstance(calls[0], dict) else {}
            tool_name = _as_text(first.get("name")) or None
            tool_arguments = _as_text(first.get("arguments")) or None
        actions = element.get("tool_actions")
        if isinstance(actions, list) and actions:
            sections.append(("Tool actions", _as_text(actions)))
            first = actions[0] if isinstance(actions[0], dict) else {}
            tool_name = _as_text(first.get("name")) or None
            tool_arguments = _as_text(first.get("args")) or None
        ledger = element.get("ledger")
        if ledger is not None:
            sections.append(("Ledger", _as_text(ledger)))
            next_speaker = _ledger_answer(ledger, "next_speaker")
            if next_speaker:
                step_kind = StepKind.HANDOFF
                metadata["handoff_to"] = agent_by_role.get(next_speaker, next_speaker)
        content = "\n\n".join(
            f"{label}:\n{text}" if label else text for label, text in sections if text
        )

    role = element.get("role")
    return Step(
        index=index,
        agent=agent,
        kind=step_kind,
        content=content,
        role=role if isinstance(role, str) else kind,
        tool_name=tool_name,
        tool_arguments=tool_arguments,
        tool_result=tool_result,
        status=StepStatus.ERROR if error else StepStatus.UNSET,
        error=error,
        metadata=metadata,
    )


def _pro_agent(element: _ProElement, framework: str, single_agent: bool) -> str:
    if single_agent:
        return _SINGLE_AGENT_NAME
    for name in ("agent", "agent_id"):
        if element.fields.has(name):
            return element.fields.string(name, non_empty=True)
    if framework == "dvd" and element.kind == "assistant":
        return "orchestrator"
    raise element.fields.error("agent_id", "is missing (the element names no agent)")


def _pro_gold_step(
    framework: str, gold: _Fields, elements: Sequence[_ProElement], fields: _Fields
) -> int:
    """Translate the framework's gold coordinate into a 0-based index into `elements`."""
    if framework in ("eva", "dvd"):
        # The gold step is already the position in the trajectory list.
        target = gold.integer("step")
        _check_step_in_range(gold, "step", target, len(fields.items("trajectory")), "'trajectory'")
        return _single_match(gold, "step", target, elements, lambda e: e.source == target)
    if framework == "smolagents":
        step = gold.integer("step")
        cursors = _smolagents_cursors(elements)
        return _single_match(gold, "step", step, elements, lambda e: cursors.get(id(e)) == step)
    if framework == "alfagent":
        step = gold.integer("step")
        return _single_match(
            gold, "step", step, elements, lambda e: _int_or_none(e.get("step_number")) == step
        )
    if framework == "metagpt":
        stage = gold.integer("stage")
        return _single_match(
            gold, "stage", stage, elements, lambda e: _int_or_none(e.get("stage")) == stage
        )
    if framework == "magentic-one":
        coordinate = gold.string("step")
        match = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", coordinate)
        if not match:
            raise gold.error("step", f"must be 'round.position', got {_shown(coordinate)}")
        round_, position = int(match[1]), int(match[2])
        return _single_match(
            gold, "step", coordinate, elements, lambda e: _coordinates(e) == (round_, position)
        )
    round_, position = gold.integer("round"), gold.integer("position")
    wanted = f"{round_}.{position}"
    if framework == "macnet":
        layered = _macnet_coordinates(elements, fields)
        return _single_match(
            gold, "round", wanted, elements, lambda e: layered.get(id(e)) == (round_, position)
        )
    # mathchat, pixelcraft: the elements carry their own round and position.
    return _single_match(
        gold, "round", wanted, elements, lambda e: _coordinates(e) == (round_, position)
    )


def _single_match(
    gold: _Fields,
    name: str,
    wanted: object,
    elements: Sequence[_ProElement],
    matches: Callable[[_ProElement], bool],
) -> int:
    found = [index for index, element in enumerate(elements) if matches(element)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise gold.error(name, f"is {_shown(wanted)}, which matches no trajectory element")
    raise gold.error(name, f"is {_shown(wanted)}, which matches elements {found}: ambiguous")


def _smolagents_cursors(elements: Sequence[_ProElement]) -> dict[int, int]:
    """The Pro release's smolagents step numbers, keyed by element identity.

    Every element other than user/final_answer framing takes the next number; numbering
    starts at 0 when the first such element is the plan, else at 1 (so action N keeps
    its native step_number when there is no re-planning).
    """
    cursors: dict[int, int] = {}
    cursor: int | None = None
    for element in elements:
        if element.kind in (None, "user", "final_answer"):
            continue
        if cursor is None:
            cursor = 0 if element.kind == "planning" else 1
        cursors[id(element)] = cursor
        cursor += 1
    return cursors


def _macnet_coordinates(
    elements: Sequence[_ProElement], fields: _Fields
) -> dict[int, tuple[int, int]]:
    """(round, position) of each MacNet agent element: the round is the DAG layer of the
    element's node (`topology.layers`, nodes `node_<n>`; nodes in no layer, such as the
    sink `node_out`, come after the last layer) and the position counts that round's
    elements in trajectory order."""
    layers = fields.mapping("topology").mapping("layers")
    layer_of: dict[str, int] = {}
    for layer_name, nodes in layers.data.items():
        if not layer_name.isdigit() or not isinstance(nodes, list):
            raise layers.error(layer_name, "must map a layer number to a list of node numbers")
        for node in nodes:
            layer_of[f"node_{node}"] = int(layer_name)
    after_last = max(layer_of.values(), default=-1) + 1
    coordinates: dict[int, tuple[int, int]] = {}
    seen: dict[int, int] = {}
    for element in elements:
        agent = element.get("agent_id")
        if not isinstance(agent, str):
            continue
        round_ = layer_of.get(agent, after_last)
        coordinates[id(element)] = (round_, seen.get(round_, 0))
        seen[round_] = seen.get(round_, 0) + 1
    return coordinates


def _coordinates(element: _ProElement) -> tuple[int | None, int | None]:
    round_ = element.round if element.round is not None else _int_or_none(element.get("round"))
    return round_, _int_or_none(element.get("position"))


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _optional_text(fields: _Fields, name: str) -> str:
    return fields.text(name) if fields.has(name) else ""


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=2)


def _describe_call(call: Any) -> str:
    if not isinstance(call, dict):
        return _as_text(call)
    return f"{_as_text(call.get('name'))}({_as_text(call.get('arguments'))})"


def _ledger_answer(ledger: Any, question: str) -> str | None:
    entry = ledger.get(question) if isinstance(ledger, dict) else None
    answer = entry.get("answer") if isinstance(entry, dict) else None
    return answer if isinstance(answer, str) and answer else None


def _image_paths(element: _ProElement) -> list[str]:
    paths: list[str] = []
    for name in ("images", "observation_images", "frames"):
        items = element.get(name)
        if isinstance(items, list):
            paths.extend(
                item["path"] for item in items if isinstance(item, dict) and "path" in item
            )
    return paths


def _pro_task_text(task: _Fields) -> str:
    query = task.string("query")
    options = task.data.get("options")
    if isinstance(options, dict) and options:
        listed = "\n".join(f"({key}) {_as_text(value)}" for key, value in options.items())
        return f"{query}\n\n{listed}"
    return query


def _pro_final_answer(fields: _Fields, elements: Sequence[_ProElement]) -> str | None:
    if fields.has("final_answer"):
        return fields.text("final_answer")
    for element in elements:
        if element.kind == "final_answer":
            return element.fields.text("content")
    return None
