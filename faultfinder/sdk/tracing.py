"""Instrument agents: `configure()` OTLP export, then record runs, agent steps and tool calls.

The spans follow the OpenTelemetry GenAI semantic conventions (plus `faultfinder.*`
attributes where those are silent), so the sidecar reads each run as the trajectory the
program went through: one step per agent turn, tool call, handoff or message, in order.

This module gathers the instrumentation in one place; its parts live in
`faultfinder.sdk.export` (where spans go), `.provider` (`configure`, `flush`,
`shutdown`), `.runs`, `.steps` and `.decorators`.
"""

from faultfinder.sdk import decorators, export, provider, runs, steps
from faultfinder.sdk.decorators import *  # noqa: F403
from faultfinder.sdk.export import *  # noqa: F403
from faultfinder.sdk.export import TRACES_PATH as TRACES_PATH
from faultfinder.sdk.provider import *  # noqa: F403
from faultfinder.sdk.runs import *  # noqa: F403
from faultfinder.sdk.steps import *  # noqa: F403

__all__: list[str] = []
__all__ += export.__all__
__all__ += provider.__all__
__all__ += runs.__all__
__all__ += steps.__all__
__all__ += decorators.__all__
