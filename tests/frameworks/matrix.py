"""The README's compatibility matrix, made from tests/frameworks/environments.py.

    python -m tests.frameworks.matrix           # print it
    python -m tests.frameworks.matrix --write   # rewrite it in README.md
    python -m tests.frameworks.matrix --check   # exit 1 when README.md differs

A unit test runs the check, so the matrix names exactly the versions the conformance
suite installs and tests.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.frameworks.environments import FRAMEWORKS, Framework

README = Path(__file__).resolve().parents[2] / "README.md"
START = "<!-- conformance-matrix:start (python -m tests.frameworks.matrix --write) -->"
END = "<!-- conformance-matrix:end -->"


def _packages(requirements: tuple[str, ...]) -> str:
    return "<br>".join(f"`{requirement}`" for requirement in requirements) or "built in"


def _row(framework: Framework) -> str:
    cells = (
        f"**{framework.name}**",
        _packages(framework.packages),
        _packages(framework.instrumentation),
        "; ".join(framework.scenarios),
        ", ".join(framework.reads),
    )
    return "| " + " | ".join(cells) + " |"


def matrix() -> str:
    lines = [
        "| framework | tested with | instrumentation | scenarios | what the sidecar reads |",
        "|---|---|---|---|---|",
        *(_row(framework) for framework in FRAMEWORKS),
    ]
    return "\n".join(lines)


def _section(text: str) -> tuple[int, int]:
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{README}: no {START!r} … {END!r} section")
    return start + len(START), end


def current() -> str:
    text = README.read_text(encoding="utf-8")
    start, end = _section(text)
    return text[start:end].strip()


def write() -> None:
    text = README.read_text(encoding="utf-8")
    start, end = _section(text)
    README.write_text(f"{text[:start]}\n{matrix()}\n{text[end:]}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite the matrix in README.md")
    action.add_argument("--check", action="store_true", help="exit 1 when README.md differs")
    options = parser.parse_args(argv)
    if options.write:
        write()
    elif options.check:
        if current() != matrix():
            print("README.md's compatibility matrix is stale: run", file=sys.stderr)
            print("  .venv/bin/python -m tests.frameworks.matrix --write", file=sys.stderr)
            return 1
    else:
        print(matrix())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
