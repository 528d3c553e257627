"""The README's compatibility matrix is the conformance suite's own list of frameworks."""

from __future__ import annotations

import re

from tests.frameworks import matrix
from tests.frameworks.environments import FRAMEWORKS


def test_the_readme_matrix_is_made_from_the_tested_environments() -> None:
    assert matrix.current() == matrix.matrix(), (
        "README.md's matrix is stale: .venv/bin/python -m tests.frameworks.matrix --write"
    )


def test_every_framework_is_pinned_and_has_its_module() -> None:
    names = [framework.name for framework in FRAMEWORKS]
    assert len(names) == len(set(names))
    for framework in FRAMEWORKS:
        assert (matrix.README.parent / "tests" / "frameworks" / framework.module).is_file()
        for requirement in (*framework.packages, *framework.instrumentation):
            assert re.fullmatch(r"[A-Za-z0-9_.\-\[\],]+==[0-9][0-9A-Za-z.]*", requirement), (
                f"{framework.name}: {requirement!r} is not an exact pin"
            )
