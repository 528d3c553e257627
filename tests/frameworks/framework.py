"""What the conformance suite records of a framework (`Framework`), what every framework
environment holds besides it (`COMMON`), and the attribute names and scenario phrases
several frameworks share.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "COMMON",
    "FED_BACK",
    "MESSAGES",
    "MODEL_500",
    "SPAN_KIND",
    "TOOL_CALLS",
    "TOOL_NAME",
    "Framework",
]

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
        """Package → version of the framework and instrumentation pins (the package's
        name without its extras: `pydantic-ai-slim[openai]` is `pydantic-ai-slim`)."""
        pins = (
            requirement.split("==", 1) for requirement in (*self.packages, *self.instrumentation)
        )
        return {name.split("[", 1)[0]: pinned for name, pinned in pins}


# What several instrumentations share, for `Framework.reads` and `Framework.scenarios`.
SPAN_KIND = "openinference.span.kind"
"""OpenInference's span kind (AGENT, CHAIN, LLM, TOOL)."""
TOOL_NAME = "tool.name"
TOOL_CALLS = "llm.output_messages.*.message.tool_calls"
"""The model's tool calls, as OpenInference flattens them."""
MESSAGES = "llm.input_messages / llm.output_messages (`tool_calls`)"
"""The model's messages both ways, as OpenInference flattens them."""
MODEL_500 = "model endpoint 500"
FED_BACK = "tool raises, error fed back"
