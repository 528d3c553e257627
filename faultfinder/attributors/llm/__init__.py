"""The LLM side of attribution: the model client (`settings`, `replies`, `client`), the
prompts and the rendering of a log into them (`prompts`, `render`), and the published
methods (`formats`, `frame`, `methods`, registered when the registry loads them).

The client's public names are re-exported here; the methods are imported on their own so
that using the client does not load the learned pre-filter.
"""

from faultfinder.attributors.llm.client import Endpoint, ModelClient, ModelSession
from faultfinder.attributors.llm.replies import (
    ModelCallFailed,
    Prompt,
    ReplyFormat,
    ReplyInvalid,
    extract_json_object,
    parse_who_and_when_text,
    resolve_agent,
    resolve_step,
)
from faultfinder.attributors.llm.settings import (
    CHARS_PER_TOKEN,
    ModelSettings,
    StructuredRung,
    estimate_tokens,
)

__all__ = [
    "CHARS_PER_TOKEN",
    "Endpoint",
    "ModelCallFailed",
    "ModelClient",
    "ModelSession",
    "ModelSettings",
    "Prompt",
    "ReplyFormat",
    "ReplyInvalid",
    "StructuredRung",
    "estimate_tokens",
    "extract_json_object",
    "parse_who_and_when_text",
    "resolve_agent",
    "resolve_step",
]
