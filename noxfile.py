"""The conformance suite's framework environments (`nox -s conformance`).

Each framework of tests/frameworks/environments.py gets its own virtual environment
(frameworks pin conflicting versions of protobuf and friends) holding the framework, its
instrumentation package and the test runner, and runs its conformance module against the
main environment's sidecar (`FAULTFINDER_BIN`). uv builds the environments: from its cache
a rebuilt environment takes seconds where pip takes minutes.

    .venv/bin/nox -s conformance                        # every framework
    .venv/bin/nox -s "conformance(framework='langgraph')"
"""

from __future__ import annotations

import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from tests.frameworks.environments import FRAMEWORKS  # noqa: E402

nox.options.default_venv_backend = "uv"
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["conformance"]


def _sidecar_command() -> str:
    command = ROOT / ".venv" / "bin" / "faultfinder"
    if not command.exists():
        raise SystemExit("the main environment is missing: run `bash scripts/install.sh` first")
    return str(command)


@nox.session(python=False)
def matrix(session: nox.Session) -> None:
    """Rewrite the README's compatibility matrix from environments.py."""
    session.run(sys.executable, "-m", "tests.frameworks.matrix", "--write", external=True)


@nox.session
@nox.parametrize("framework", [framework.name for framework in FRAMEWORKS])
def conformance(session: nox.Session, framework: str) -> None:
    """One framework's conformance module, in its own environment."""
    (entry,) = [f for f in FRAMEWORKS if f.name == framework]
    session.install(*entry.requirements)
    session.run(
        "python",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        # The root conftest imports faultfinder, which this environment does not hold.
        "--confcutdir=tests/frameworks",
        # pyproject's pytest-asyncio options mean nothing here (no async tests).
        "-W",
        "ignore::pytest.PytestConfigWarning",
        f"tests/frameworks/{entry.module}",
        *session.posargs,
        env={
            "FAULTFINDER_CONFORMANCE": "1",
            "FAULTFINDER_CONFORMANCE_FRAMEWORK": framework,
            # Which entry runs: entries sharing a module (one framework traced two ways).
            "FAULTFINDER_BIN": _sidecar_command(),
            "PYTHONPATH": str(ROOT),
        },
    )
