"""Arithmetic an agent writes out, checked against its own operands: "3 nights × EUR 142 =
EUR 416" needs no tool output to be found wrong. Calculations (numbers with separators,
decimals, a currency or a unit, joined by + - × x * / ÷ or "% of", in parentheses or not,
then "=", "equals", "is", "comes to" or "gives" and a result) are reported when the result
is neither the computed value rounded or cut to its own decimals nor within 0.5 % of it
(sums and products mixed without parentheses may also be read left to right). Never
reported: dates, times, identifiers ("AF 1024", "room 12"), ranges ("10-12 days"), phone
numbers, versions, list markers, algebra ("2x + 3 = 7"), amounts in "k", mixed units ("90
min + 30 min = 2 hours"), code, a calculation the text corrects or repeats from earlier.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from faultfinder.attributors.model import Step
from faultfinder.attributors.values import without_dates

__all__ = ["ArithmeticChecks", "WrongArithmetic", "wrong_arithmetic"]

_CURRENCIES = "eur|usd|gbp|chf|jpy|cad|aud|inr|cny|sek|nok|dkk|pln|euros?|dollars?"
_LABELS = (  # words whose number names something ("room 12", "step 3"): not an operand
    "order|room|flight|gate|seat|ticket|invoice|step|item|version|line|page|no|number|id|case|"
    "issue|bug|pr|build|row|table|chapter|section|question|task|option|level|floor|phase|part|v"
)
_BLANKED = (
    r"```.*?(?:```|\Z)",  # code
    r"(?m)^[ \t]*[-*+•][ \t]",  # a bullet
    r"\*\*|\b0x[0-9a-fA-F]+\b",  # bold, hexadecimal
    rf"\b(?!(?i:{_CURRENCIES})\b)[A-Z]{{1,4}}[ -]?\d+\b",  # "AF 1024", "Q3": a name
)
_BLANKED_LOWER = (
    rf"\b(?:{_LABELS})\s+\d[\d.,]*",  # "room 12"
    r"(?<=[a-z:#_@])\d[\d.,]*|(?<!\d)\.\d[\d.,]*",  # "v1.2", "mp3", "16:9", ".5"
    r"\b\d+(?:st|nd|rd|th)\b|\d[\d.,]*(?![hsglt]\b)[a-z]\b|\d[a-z]+\d",  # "3rd", "2x", "4e2"
)
_BLOB = re.compile(r"\d(?:[\d.,]*\d)?")
_SHAPE = re.compile(r"(?:[1-9]\d{0,2}(?:,\d{3})+|[1-9]\d*|0)(?:\.\d+)?")  # not "2,5", "0100"
_TOKEN = re.compile(
    rf"(?:(?P<cur>[€$£¥₹]|\b(?:{_CURRENCIES})\b)\s?)?"
    r"(?P<num>(?<![\w.,])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)(?P<pct>\s?(?:%|percent\b|pct\b))?"
    r"(?:\s?(?P<unit>(?!(?:x|of|is|equals|gives|comes|equal|and|or|to|per|in)\b)[a-z]{2,}"
    r"|[hsglt]\b))?|(?P<eq>=|\b(?:is )?equal to\b|\bequals\b|\bgives\b|\bcomes to\b|\bis\b)"
    r"|(?P<op>[+×*/÷()]|\bx\b|\bof\b)|(?P<minus>[-−–—])|(?P<gap>[ \t]+)|(?P<x>[a-z]+|.|\n)"
)
_SCALE = re.compile(r"k|m|b|bn|mn|million|thousand|billion|trillion|hundred|dozen|lakh|crore")
_MEASURE = re.compile(  # units converted between: two in a calculation mean a conversion
    r"s|sec|second|min|minute|h|hr|hour|day|week|month|year|yr|ms|mm|cm|km|ft|foot|feet|yd|"
    r"yard|mi|mile|g|kg|mg|lb|pound|oz|ounce|t|ton|tonne|ml|l|litre|liter|gallon|kb|mb|gb|"
    rf"tb|byte|[€$£¥₹]|{_CURRENCIES}"
)
_PIECE = re.compile(r"(?<=[.!?;])\s+|\n")  # a calculation never spans two
_OPERATOR = re.compile(r"(?i)[+×*/÷−–—]|\bx\b|\d[x-]\d| - |%\s*of|percent of")  # a cheap test
_CONNECTOR = re.compile(r"(?i)=|\b(?:is|equals|gives|comes to)\b")
_WORDS = {"×": "*", "x": "*", "÷": "/", "=": "="}
_OPERATORS = frozenset({"+", "-", "-u", "*", "/", "of"})
_AST_OPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
}  # fmt: skip


@dataclass(frozen=True)
class _Num:
    text: str
    value: float
    decimals: int
    percent: bool
    unit: str | None


_Token = _Num | str  # a number, + - * / of, "-u" (unspaced minus), ( ), =, eq, | (a break)


@dataclass(frozen=True)
class WrongArithmetic:
    """A calculation ("3 × 142", units left out) whose stated result does not follow."""

    kind: ClassVar[str] = "wrong-arithmetic"
    written: str
    stated: str
    computed: str

    def said_by(self, agent: str) -> str:
        """One sentence: what the agent wrote and what its operands give."""
        return f"{agent} wrote {self.written} = {self.stated}; {self.written} is {self.computed}"


def _read(number: str) -> tuple[float, int]:
    """A number as written ("1,250.50"): its value and its decimal places."""
    return float(number.replace(",", "")), len(number.partition(".")[2])


def _tokens(text: str) -> list[_Token]:
    """The text as `_Token`s, what is no arithmetic blanked out (and `without_dates`)."""
    for pattern in _BLANKED:
        text = re.sub(pattern, lambda m: " " * len(m[0]), text, flags=re.DOTALL)
    text = re.sub(r"(?<=\d)[x×](?=\d)", " × ", text)
    text = without_dates(re.sub(r"\bper cent\b", "percent", text, flags=re.IGNORECASE))
    for pattern in _BLANKED_LOWER:
        text = re.sub(pattern, lambda m: " " * len(m[0]), text)
    text = _BLOB.sub(lambda m: m[0] if _SHAPE.fullmatch(m[0]) else " " * len(m[0]), text)
    out: list[_Token] = []
    for m in _TOKEN.finditer(text):
        kind, word = "num" if m["num"] else m.lastgroup, m.group()
        if kind == "num":
            number, unit = m["num"], m["cur"] or m["unit"]
            out.append(_Num(number, *_read(number), m["pct"] is not None, unit))
        elif kind == "minus":
            spaced = text[m.start() - 1 : m.start()] == " " == text[m.end() : m.end() + 1]
            out.append("-" if spaced else "-u" if word in "-−" else "|")  # "3–5": a range
        elif kind != "gap":
            out.append(_WORDS.get(word, "eq" if kind == "eq" else word) if kind != "x" else "|")
    return out


def _evaluated(node: ast.expr) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _AST_OPS:
        return _AST_OPS[type(node.op)](_evaluated(node.left), _evaluated(node.right))
    raise ValueError("not a calculation")


def _values(seq: Sequence[float | str]) -> list[float]:
    """× and / before + and -; without parentheses, left to right too (raises for no sum)."""
    words = [t.rstrip("u") if isinstance(t, str) else repr(t) for t in seq]
    sources = [" ".join(words)]
    if "(" not in words:  # ((a + b) × c)
        closed = [w + ")" if i % 2 == 0 and i else w for i, w in enumerate(words)]
        sources.append("(" * (len(words) // 2) + " ".join(closed))
    return [_evaluated(ast.parse(source, mode="eval").body) for source in sources]


def _worths(left: Sequence[_Token], result: _Num) -> list[float | str] | None:
    """The calculation with each number's value (a percentage of something as a fraction),
    or None when its numbers are not one calculation: an amount in "k" or "million", two
    convertible units, a percentage added to a plain number, "of" after no percentage."""
    numbers = [t for t in left if isinstance(t, _Num)]
    units = {n.unit.removesuffix("s") for n in [*numbers, result] if n.unit}
    measured = [unit for unit in units if _MEASURE.fullmatch(unit)]
    if len(measured) > 1 or any(_SCALE.fullmatch(unit) for unit in units):
        return None
    plain = result.percent and all(n.percent for n in numbers)
    out: list[float | str] = []
    for at, token in enumerate(left):
        before, after = left[at - 1] if at else "", left[at + 1] if at + 1 < len(left) else ""
        if token == "of" and not (isinstance(before, _Num) and before.percent):
            return None
        if isinstance(token, _Num) and token.percent and not plain:
            if not {before, after} & {"of", "*"}:
                return None
            out.append(token.value / 100)
        else:
            out.append(token.value if isinstance(token, _Num) else token.replace("of", "*"))
    return out


def _agrees(stated: float, decimals: int, computed: float) -> bool:
    """Whether `stated` is `computed` rounded or cut to `decimals`, or within 0.5 %."""
    unit, off = 10.0**-decimals, computed - stated
    cut = 0 <= (off if computed >= 0 else -off) < unit - 1e-12
    return abs(off) <= unit / 2 + 1e-9 or cut or abs(off) <= 0.005 * abs(computed)


def _judged(left: Sequence[_Token], result: _Num, sign: float) -> WrongArithmetic | None:
    """The finding for `left` = `result` (negated when `sign` is -1), if it is wrong."""
    seq = _worths(left, result)
    try:
        values = _values(seq) if seq is not None else []
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None
    ratio = result.percent and not all(t.percent for t in left if isinstance(t, _Num))
    shown = [v * 100 if ratio else v for v in values]
    stated, decimals = sign * result.value, result.decimals
    if not values or any(_agrees(stated, decimals, v) for v in shown) or stated >= 0 > max(values):
        return None  # right, or "20 - 25 is 5": a range, a difference either way round
    if "/" in (seq or ()) and any(_agrees(stated, decimals, v * 100) for v in values):
        return None  # a ratio given as a percentage
    digits = 0 if abs(shown[0] - round(shown[0])) < 1e-9 else max(decimals, 2)
    computed = f"{shown[0]:,.{digits}f}".rstrip("0").rstrip(".") if digits else f"{shown[0]:,.0f}"
    words = [f"{t.text}{'%' * t.percent}" if isinstance(t, _Num) else t for t in left]
    written = " ".join(words).replace("*", "×").replace("-u", "-").replace("( ", "(")
    percent, minus = "%" * result.percent, "-" * (sign < 0)
    return WrongArithmetic(
        written.replace(" )", ")"), minus + result.text + percent, computed + percent
    )


def _calculations(tokens: Sequence[_Token]) -> Iterator[tuple[int, int, WrongArithmetic]]:
    """Each wrong calculation: (first token, last, finding). One reaches back to the last
    break, less a list marker ("2)") or an unclosed parenthesis opening it."""
    for e, token in enumerate(tokens):
        start = e
        while token in ("=", "eq") and start > 0 and tokens[start - 1] not in ("|", "=", "eq"):
            start -= 1
        left = list(tokens[start:e])
        if len(left) > 2 and isinstance(left[0], _Num) and left[1] == ")":
            left = left[2:]
        while left and left[0] == "(" and left.count("(") > left.count(")"):
            left = left[1:]
        j = e + 1 + (tokens[e + 1 : e + 2] == ["-u"])
        result, following = (*tokens[j : j + 2], "|", "|")[:2]
        if not left or left[0] in _OPERATORS or not _OPERATORS & set(left):
            continue  # no calculation, or one opened by a sign: "-5 + 3"
        goes_on = isinstance(following, _Num) or following in {*_OPERATORS, "("}
        if not isinstance(result, _Num) or goes_on or (token == "eq" and "-u" in left):
            continue  # no result, or it goes on ("= 426 + 50"); "10-12 is": a range
        found = _judged(left, result, -1.0 if j > e + 1 else 1.0)
        if found is not None:
            yield e - len(left), j, found


def wrong_arithmetic(text: str) -> list[WrongArithmetic]:
    """The calculations in `text` whose stated result does not follow from their operands,
    in order; not one whose right result the text also states (it is being corrected)."""
    out: list[WrongArithmetic] = []
    for piece in _PIECE.split(re.sub(_BLANKED[0], " ", text, flags=re.DOTALL)):
        tokens = _tokens(piece) if _OPERATOR.search(piece) and _CONNECTOR.search(piece) else []
        for first, last, found in _calculations(tokens):
            right, others = _read(found.computed.rstrip("%"))[0], _SHAPE.findall(text)
            for own in (t.text for t in tokens[first : last + 1] if isinstance(t, _Num)):
                if own in others:
                    others.remove(own)
            if not any(_agrees(*_read(n), right) for n in others):
                out.append(found)
    return out


class ArithmeticChecks:
    """Walks a run: each acting step's text and call arguments are checked (`wrong_arithmetic`);
    a calculation the task or an earlier step wrote is passed on, not made, and left out."""

    def __init__(self, task: str = "") -> None:
        self._seen = set(wrong_arithmetic(task))

    def push(self, step: Step, *, acting: bool) -> WrongArithmetic | None:
        own = [step.content, step.tool_arguments or ""] if acting else [step.content]
        mine = [item for text in own for item in wrong_arithmetic(text)]
        first = next((item for item in mine if item not in self._seen), None)
        self._seen.update([*mine, *wrong_arithmetic(step.tool_result or "")])
        return first if acting else None
