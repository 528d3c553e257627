"""The `faultfinder` command line, the top layer: it may import every other part, and
none imports it. Commands whose modules are slow to import (the benchmarks, training,
the local model) are loaded only when they run."""

from faultfinder.cli.main import main

__all__ = ["main"]
