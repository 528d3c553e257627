"""The corpus programs' tool data and tool bodies: deterministic, standard library only.

Every program under this folder wraps these functions as its framework's tools, so
each framework answers the same tasks from the same facts. The cities and countries are
fictional, so that a model cannot answer from memory and has to call the tools.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from typing import Any

__all__ = [
    "CITIES",
    "COUNTRIES",
    "MAX_TOKENS",
    "SALES_CSV",
    "answer_line",
    "calculate",
    "city_facts",
    "convert_units",
    "country_facts",
    "read_sales_csv",
    "read_task",
    "sales_total",
]

CITIES: dict[str, dict[str, object]] = {
    "Varnholm": {
        "country": "Orlania",
        "population": 48210,
        "founded": 1612,
        "elevation_m": 312,
        "area_km2": 41.5,
        "mayor": "Ida Brenner",
    },
    "Kestrel Bay": {
        "country": "Orlania",
        "population": 15730,
        "founded": 1788,
        "elevation_m": 4,
        "area_km2": 12.2,
        "mayor": "Tomas Vell",
    },
    "Dunmore Ridge": {
        "country": "Orlania",
        "population": 9120,
        "founded": 1834,
        "elevation_m": 1270,
        "area_km2": 18.0,
        "mayor": "Hana Ostrova",
    },
    "Pellwick": {
        "country": "Brevania",
        "population": 73405,
        "founded": 1540,
        "elevation_m": 88,
        "area_km2": 65.3,
        "mayor": "Marco Leddy",
    },
    "Silverford": {
        "country": "Brevania",
        "population": 22860,
        "founded": 1701,
        "elevation_m": 145,
        "area_km2": 20.4,
        "mayor": "Anja Koller",
    },
    "Tamsin Falls": {
        "country": "Brevania",
        "population": 6480,
        "founded": 1902,
        "elevation_m": 560,
        "area_km2": 9.6,
        "mayor": "Ruben Sato",
    },
    "Ashgrove": {
        "country": "Caldoria",
        "population": 31975,
        "founded": 1655,
        "elevation_m": 230,
        "area_km2": 27.1,
        "mayor": "Lena Marsh",
    },
    "Corvell": {
        "country": "Caldoria",
        "population": 102330,
        "founded": 1498,
        "elevation_m": 41,
        "area_km2": 88.9,
        "mayor": "Piet Amsel",
    },
    "Marrowby": {
        "country": "Caldoria",
        "population": 12044,
        "founded": 1811,
        "elevation_m": 705,
        "area_km2": 15.8,
        "mayor": "Nora Quill",
    },
}
"""Fictional cities by name."""

COUNTRIES: dict[str, dict[str, object]] = {
    "Orlania": {"capital": "Varnholm", "currency": "crown", "eur_per_unit": 0.125},
    "Brevania": {"capital": "Pellwick", "currency": "mark", "eur_per_unit": 0.4},
    "Caldoria": {"capital": "Corvell", "currency": "florin", "eur_per_unit": 2.5},
}
"""Fictional countries by name; `eur_per_unit`: euros per unit of the currency."""

SALES_CSV = """month,region,product,units,unit_price
Jan,North,lantern,120,15
Jan,South,lantern,95,15
Jan,North,candle,300,2
Feb,North,lantern,80,15
Feb,South,candle,410,2
Feb,South,lantern,130,15
Mar,North,candle,260,2
Mar,South,lantern,105,15
Mar,North,lantern,90,15
"""
"""A small shop's first-quarter sales."""
_SALES_FIELDS = SALES_CSV.splitlines()[0].split(",")
_SALES_ROWS = SALES_CSV.strip().splitlines()[1:]


def _key(name: str) -> str:
    return " ".join(name.replace("_", " ").split()).casefold()


def _find(table: dict[str, dict[str, object]], name: str) -> str | None:
    wanted = _key(name)
    for known in table:
        if _key(known) == wanted:
            return known
    return None


def city_facts(city: str) -> str:
    """Facts about one or more cities: country, population, founding year, elevation,
    area, mayor.

    Args:
        city: the city's name, e.g. Varnholm, or several names separated by commas
    """
    lines = []
    for name in [part.strip() for part in city.split(",") if part.strip()] or [city]:
        found = _find(CITIES, name)
        if found is None:
            lines.append(f"No city named {name!r}. Known cities: {', '.join(CITIES)}.")
            continue
        facts = CITIES[found]
        lines.append(
            f"{found}: country {facts['country']}; population {facts['population']}; "
            f"founded {facts['founded']}; elevation {facts['elevation_m']} m; "
            f"area {facts['area_km2']} km2; mayor {facts['mayor']}"
        )
    return "\n".join(lines)


def country_facts(country: str) -> str:
    """Facts about a country: capital, currency and its value in euros.

    Args:
        country: the country's name, e.g. Orlania
    """
    found = _find(COUNTRIES, country)
    if found is None:
        return f"No country named {country!r}. Known countries: {', '.join(COUNTRIES)}."
    facts = COUNTRIES[found]
    return (
        f"{found}: capital {facts['capital']}; currency {facts['currency']}; "
        f"1 {facts['currency']} = {facts['eur_per_unit']} EUR"
    )


def read_sales_csv() -> str:
    """The shop's sales table (sales.csv) as CSV text."""
    return SALES_CSV


def sales_total(product: str = "", region: str = "", month: str = "") -> str:
    """Total units and revenue of the rows of sales.csv that match the filters given.

    Args:
        product: lantern or candle; empty for every product
        region: North or South; empty for every region
        month: Jan, Feb or Mar; empty for every month
    """
    wanted = {"product": product, "region": region, "month": month[:3]}
    rows = [dict(zip(_SALES_FIELDS, line.split(","), strict=True)) for line in _SALES_ROWS]
    kept = [
        row
        for row in rows
        if all(
            not value or row[key].casefold() == value.strip().casefold()
            for key, value in wanted.items()
        )
    ]
    units = sum(int(row["units"]) for row in kept)
    revenue = sum(int(row["units"]) * int(row["unit_price"]) for row in kept)
    chosen = ", ".join(f"{key} {value}" for key, value in wanted.items() if value) or "all rows"
    return f"sales.csv, {chosen}: units {units}; revenue {revenue}"


# Each unit's value in its dimension's base unit (metre, kilogram, litre).
_UNITS: dict[str, tuple[str, float]] = {
    "m": ("length", 1.0),
    "km": ("length", 1000.0),
    "ft": ("length", 0.3048),
    "mi": ("length", 1609.344),
    "kg": ("mass", 1.0),
    "lb": ("mass", 0.45359237),
    "l": ("volume", 1.0),
    "gal": ("volume", 3.785411784),
}
_ALIASES = {
    "meter": "m",
    "metre": "m",
    "meters": "m",
    "metres": "m",
    "kilometer": "km",
    "kilometre": "km",
    "kilometers": "km",
    "kilometres": "km",
    "foot": "ft",
    "feet": "ft",
    "mile": "mi",
    "miles": "mi",
    "kilogram": "kg",
    "kilograms": "kg",
    "pound": "lb",
    "pounds": "lb",
    "lbs": "lb",
    "liter": "l",
    "litre": "l",
    "liters": "l",
    "litres": "l",
    "gallon": "gal",
    "gallons": "gal",
    "celsius": "c",
    "°c": "c",
    "fahrenheit": "f",
    "°f": "f",
}


def _unit(name: str) -> str:
    key = name.strip().casefold()
    return _ALIASES.get(key, key)


def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a quantity between units (m, km, ft, mi, kg, lb, l, gal, c, f), rounded to
    two decimals.

    Args:
        value: the quantity to convert
        from_unit: its unit, e.g. km
        to_unit: the unit wanted, e.g. mi
    """
    source, target = _unit(from_unit), _unit(to_unit)
    if {source, target} <= {"c", "f"}:
        celsius = value if source == "c" else (value - 32) * 5 / 9
        result = celsius if target == "c" else celsius * 9 / 5 + 32
    elif source in _UNITS and target in _UNITS and _UNITS[source][0] == _UNITS[target][0]:
        result = value * _UNITS[source][1] / _UNITS[target][1]
    else:
        return f"Cannot convert {from_unit!r} to {to_unit!r}."
    return f"{value:g} {from_unit} = {round(result, 2):g} {to_unit}"


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
"""A thousands separator inside a number (48,210), not an argument separator."""
_FUNCTIONS = {"round": round, "abs": abs, "min": min, "max": max, "sqrt": math.sqrt}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        number: float = node.value  # an int stays an int: round(x, 2)
        return number
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        if isinstance(node.op, ast.Pow) and abs(_evaluate(node.right)) > 100:
            raise ValueError("exponent too large")
        operation: Any = _OPERATORS[type(node.op)]
        result: float = operation(_evaluate(node.left), _evaluate(node.right))
        return result
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        unary: Any = _OPERATORS[type(node.op)]
        negated: float = unary(_evaluate(node.operand))
        return negated
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        function: Any = _FUNCTIONS[node.func.id]
        called: float = function(*(_evaluate(arg) for arg in node.args))
        return called
    raise ValueError("only numbers, + - * / // % **, parentheses and round/abs/min/max/sqrt")


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression, e.g. (12 + 30) / 4 or round(7 / 3, 2).

    Args:
        expression: numbers with + - * / and parentheses; round() is allowed
    """
    try:
        text = _THOUSANDS.sub("", expression).replace("^", "**")
        tree = ast.parse(text, mode="eval")
        result = _evaluate(tree)
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError, OverflowError) as exc:
        return f"Error: {exc}"
    if isinstance(result, float) and result.is_integer() and abs(result) < 1e15:
        result = int(result)
    elif isinstance(result, float):
        result = round(result, 6)
    return f"{expression} = {result}"


# What every program does around its agents -----------------------------------------

MAX_TOKENS = 256
"""Completion tokens per model call: a tool call or a short answer needs far fewer, and
a small model that starts to ramble stops there instead of running on for minutes."""

_ANSWER_PREFIXES = ("final answer:", "answer:", "the answer is")


def read_task() -> str:
    """The task: the program's standard input, stripped."""
    import sys

    return sys.stdin.read().strip()


def answer_line(text: str) -> str:
    """The final answer in an agent's reply: its last non-empty line, without an
    `Answer:` label, markdown emphasis or a closing full stop."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    line = line.replace("**", "").strip()
    for prefix in _ANSWER_PREFIXES:
        if line.casefold().startswith(prefix):
            line = line[len(prefix) :].strip()
    return line.rstrip(".").strip() or "(no answer)"
