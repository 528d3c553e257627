"""The reading layer: its public names, and that it stays pure (no I/O layers beneath it)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import faultfinder.reading as reading

_PURE_ROOTS = {"faultfinder", "__future__", "orjson", "pydantic"}
"""Top-level packages the reading layer may import besides the standard library."""
_SIDECAR = "faultfinder.server"


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_the_reading_layer_exports_its_public_names() -> None:
    # Every name it promises resolves, and the ones the store and decoder rely on are there.
    assert all(getattr(reading, name, None) is not None for name in reading.__all__)
    assert {"SpanRecord", "assemble_trajectory", "map_span", "run_facts", "run_id_of"} <= set(
        reading.__all__
    )


def test_reading_spans_imports_neither_the_sidecar_nor_any_io_library() -> None:
    package = Path(reading.__file__).parent
    offending = {
        f"{path.name}: {name}"
        for path in package.glob("*.py")
        for name in _imported_modules(path)
        if name.startswith(_SIDECAR)
        or name.split(".")[0] not in _PURE_ROOTS | sys.stdlib_module_names
    }
    assert not offending
