"""`faultfinder bench nightly`: the benchmark suite as faultfinder's nightly score.

`suite` reads the suite file (datasets × attributors × settings), `runner` runs a night
(resumable) and stores each entry in the history (`faultfinder.server.store.BenchHistory`,
in the sidecar's database), `entry` scores one entry with `bench run`'s benchmark, `gate`
compares it with its last accepted entry (exact McNemar on per-record correctness),
`report` writes the run's report.html and `command` holds the click commands.
"""

from faultfinder.evaluation.nightly.command import history_group, nightly_command
from faultfinder.evaluation.nightly.gate import GateResult, MetricChange, compare, describe
from faultfinder.evaluation.nightly.runner import NightlyOptions, NightlyResult, run_nightly
from faultfinder.evaluation.nightly.suite import DEFAULT_SUITE, Suite, SuiteError, load_suite

__all__ = [
    "DEFAULT_SUITE",
    "GateResult",
    "MetricChange",
    "NightlyOptions",
    "NightlyResult",
    "Suite",
    "SuiteError",
    "compare",
    "describe",
    "history_group",
    "load_suite",
    "nightly_command",
    "run_nightly",
]
