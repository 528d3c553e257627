"""The attribute names faultfinder reads and writes, for code that instruments agents.

They live in `faultfinder.conventions`, which the sidecar reads as well; this module
keeps them where the SDK's users import them from.
"""

from faultfinder.conventions import *  # noqa: F403
