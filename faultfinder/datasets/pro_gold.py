"""Where a Who&When Pro gold label points: each framework names the faulty step in its own
coordinate (a list position, a step number, a stage, a round and position, a DAG layer),
translated here into a 0-based index into the record's steps."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from faultfinder.datasets.fields import Fields, shown
from faultfinder.datasets.pro_elements import ProElement, int_or_none


def pro_gold_step(
    framework: str, gold: Fields, elements: Sequence[ProElement], fields: Fields
) -> int:
    """Translate the framework's gold coordinate into a 0-based index into `elements`."""
    if framework in ("eva", "dvd"):
        # The gold step is already the position in the trajectory list.
        target = gold.integer("step")
        gold.check_step_in_range("step", target, len(fields.items("trajectory")), "'trajectory'")
        return _single_match(gold, "step", target, elements, lambda e: e.source == target)
    if framework == "smolagents":
        step = gold.integer("step")
        cursors = _smolagents_cursors(elements)
        return _single_match(gold, "step", step, elements, lambda e: cursors.get(id(e)) == step)
    if framework == "alfagent":
        step = gold.integer("step")
        return _single_match(
            gold, "step", step, elements, lambda e: int_or_none(e.get("step_number")) == step
        )
    if framework == "metagpt":
        stage = gold.integer("stage")
        return _single_match(
            gold, "stage", stage, elements, lambda e: int_or_none(e.get("stage")) == stage
        )
    if framework == "magentic-one":
        coordinate = gold.string("step")
        match = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", coordinate)
        if not match:
            raise gold.error("step", f"must be 'round.position', got {shown(coordinate)}")
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
    gold: Fields,
    name: str,
    wanted: object,
    elements: Sequence[ProElement],
    matches: Callable[[ProElement], bool],
) -> int:
    found = [index for index, element in enumerate(elements) if matches(element)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise gold.error(name, f"is {shown(wanted)}, which matches no trajectory element")
    raise gold.error(name, f"is {shown(wanted)}, which matches elements {found}: ambiguous")


def _smolagents_cursors(elements: Sequence[ProElement]) -> dict[int, int]:
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
    elements: Sequence[ProElement], fields: Fields
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


def _coordinates(element: ProElement) -> tuple[int | None, int | None]:
    round_ = element.round if element.round is not None else int_or_none(element.get("round"))
    return round_, int_or_none(element.get("position"))
