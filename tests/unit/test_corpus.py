"""The injection corpus (data/corpus): its tasks are well formed and answerable
from the shared tools, and every agent program keeps to the contract the injection
harness relies on."""

from __future__ import annotations

import ast
import importlib.util
import json
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from faultfinder.injection.grading import answers_match
from faultfinder.injection.harness import read_tasks

CORPUS = Path(__file__).resolve().parents[2] / "data" / "corpus"
PROGRAMS = sorted((CORPUS / "programs").glob("*_team.py"))


@pytest.fixture(scope="module")
def tools() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "corpus_tools", CORPUS / "programs" / "corpus_tools.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tasks_file_is_what_the_harness_reads() -> None:
    tasks = read_tasks(CORPUS / "tasks.jsonl")
    assert 40 <= len(tasks) <= 200
    assert len({task.id for task in tasks}) == len(tasks)  # ids are unique
    lines = [json.loads(line) for line in (CORPUS / "tasks.jsonl").read_text().splitlines()]
    kinds = Counter(line["kind"] for line in lines)
    assert set(kinds) == {"lookup", "conversion", "table", "csv"}, kinds
    assert all(count >= 5 for count in kinds.values()), kinds
    # Short, exactly checkable answers: a number or a name of at most three words.
    assert all(len(task.answer.split()) <= 3 for task in tasks)


def test_the_tools_are_deterministic_and_give_the_facts_the_answers_need(
    tools: ModuleType,
) -> None:
    assert "population 48210" in tools.city_facts("varnholm")
    assert tools.city_facts("Varnholm, Kestrel Bay").count("population") == 2
    assert "No city named" in tools.city_facts("Paris")
    assert "capital Corvell" in tools.country_facts("Caldoria")
    assert tools.sales_total("lantern") == "sales.csv, product lantern: units 620; revenue 9300"
    assert "units 195" in tools.sales_total("lantern", month="March")
    assert tools.convert_units(42, "km", "mi") == "42 km = 26.1 mi"
    assert tools.convert_units(30, "celsius", "fahrenheit").endswith("= 86 fahrenheit")
    assert tools.calculate("48,210 + 15730") == "48,210 + 15730 = 63940"
    assert tools.calculate("round(9120 / 18.0)").endswith("= 507")
    assert tools.calculate("__import__('os')").startswith("Error")
    assert tools.calculate("9 ** 999").startswith("Error")


def test_an_agent_reply_becomes_the_answer_line(tools: ModuleType) -> None:
    assert tools.answer_line("I looked it up.\n**Final answer:** 48210.") == "48210"
    assert tools.answer_line("Answer: Tomas Vell") == "Tomas Vell"
    assert tools.answer_line("") == "(no answer)"
    assert answers_match(tools.answer_line("The total is\n620"), "620")


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_each_program_keeps_the_contract(program: Path) -> None:
    source = program.read_text()
    tree = ast.parse(source)
    imported = {
        node.module.split(".")[0] if isinstance(node, ast.ImportFrom) and node.module else ""
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    } | {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert "faultfinder" not in imported  # the framework's own client and instrumentation only
    assert {"corpus_tools", "corpus_tracing"} <= imported
    for needed in (
        "OPENAI_BASE_URL",
        "FAULTFINDER_AGENT_MODEL",
        "read_task()",
        "answer_line(",
        "provider.shutdown()",
        "MAX_TOKENS",
    ):
        assert needed in source, needed
    assert source.count('name="') + source.count('add_node("') >= 2  # two agents or more


def test_there_are_programs_for_three_frameworks_or_more() -> None:
    # They run in the frameworks' own environments (PROGRAMS.md), never imported here.
    assert len(PROGRAMS) >= 3


def test_every_single_city_lookup_answer_is_what_the_tool_says(tools: ModuleType) -> None:
    # The tasks more_tasks.py adds are computed from the tool data; a lookup's answer must
    # be what `city_facts` returns for that city, or the grader would fail right runs.
    checked = 0
    for task in read_tasks(CORPUS / "tasks.jsonl"):
        cities = [city for city in tools.CITIES if city in task.task]
        two_hops = "capital" in task.task or "currency" in task.task
        if task.id.startswith("lookup") and len(cities) == 1 and not two_hops:
            facts = tools.city_facts(cities[0])
            assert task.answer in facts, (task, facts)
            checked += 1
    assert checked >= 30
