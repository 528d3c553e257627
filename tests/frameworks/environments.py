"""The frameworks of the conformance suite: what each environment installs, which module
tests it, and what the sidecar reads of its spans. Plain data, read by noxfile.py (to
build the environments), by the conformance modules (to check the installed versions) and
by `matrix.py` (the README's compatibility matrix), so the three cannot disagree.

Frameworks pin dependencies that cannot share one environment (CrewAI protobuf 7,
autogen-core protobuf 5.29), so each framework gets its own.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COMMON", "FRAMEWORKS", "Framework", "by_name"]

COMMON = (
    "pytest>=8.2",
    "httpx>=0.27",
    "opentelemetry-sdk>=1.27",
    "opentelemetry-exporter-otlp-proto-http>=1.27",
)
"""What every framework environment holds besides the framework: the test runner, the
HTTP client that reads the sidecar's API and the standard OTLP exporter. No faultfinder
code: the sidecar under test is the main environment's `faultfinder serve`."""


@dataclass(frozen=True)
class Framework:
    name: str
    """As the README's matrix names it, and the nox session's parameter."""
    module: str
    """The conformance module under tests/frameworks/."""
    packages: tuple[str, ...]
    """The framework itself, pinned (`name==version`)."""
    instrumentation: tuple[str, ...]
    """Its instrumentation packages, pinned."""
    reads: tuple[str, ...]
    """The span attributes (and span names) the sidecar reads of this instrumentation."""
    scenarios: tuple[str, ...]
    """What the module drives, in a few words each."""
    extra: tuple[str, ...] = ()
    """Other packages the scenarios need (a model client), pinned or bounded."""

    @property
    def requirements(self) -> tuple[str, ...]:
        return (*COMMON, *self.packages, *self.instrumentation, *self.extra)

    @property
    def pinned(self) -> dict[str, str]:
        """Package → version of the framework and instrumentation pins."""
        return dict(
            requirement.split("==", 1) for requirement in (*self.packages, *self.instrumentation)
        )


FRAMEWORKS: tuple[Framework, ...] = (
    Framework(
        name="smolagents",
        module="test_smolagents.py",
        packages=("smolagents==1.26.0",),
        instrumentation=("openinference-instrumentation-smolagents==0.1.43",),
        extra=("openai>=1.50",),
        reads=(
            "openinference.span.kind",
            "AGENT span name `<agent>.run`",
            "input.value (`task`)",
            "output.value",
            "tool.name",
            "llm.output_messages.*.message.tool_calls",
        ),
        scenarios=(
            "manager + managed agent (tool-calling)",
            "model endpoint 500",
            "tool raises, error fed back",
        ),
    ),
)


def by_name(name: str) -> Framework:
    for framework in FRAMEWORKS:
        if framework.name == name:
            return framework
    raise KeyError(f"no framework {name!r} in tests/frameworks/environments.py")
