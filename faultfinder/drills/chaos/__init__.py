"""`faultfinder bench chaos`: SIGKILL a sidecar under sustained ingest and count what survived,
drive ingest past its capacity to check that it sheds load without losing spans, and
re-run the hostile probes of issue 28.

`traffic` makes the load, `sending` sends it as an exporter would, `kills` and `overload`
are two drills, `hostile` runs the eight hostile ones (`hostile_runs`, `hostile_database`,
`hostile_uploads`, `hostile_requests`, with `hostile_bodies` and `hostile_probes`),
`stored_state` reads what the database holds afterwards and `command` is the click command.
"""

from faultfinder.drills.chaos.command import chaos_command, run_fuzz_suite
from faultfinder.drills.chaos.hostile import run_hostile
from faultfinder.drills.chaos.hostile_context import FULL, QUICK, Finding, HostileScale
from faultfinder.drills.chaos.kills import (
    KillChaosOutcome,
    KillDrill,
    KillReport,
    run_kill_chaos,
)
from faultfinder.drills.chaos.overload import (
    OverloadDrill,
    OverloadOutcome,
    OverloadReport,
    measure_capacity,
    run_overload,
)
from faultfinder.drills.chaos.stored_state import StoredState, read_stored_state
from faultfinder.drills.chaos.traffic import ChaosRequest, ChaosTraffic
from faultfinder.evaluation.sidecar import SidecarProcess

__all__ = [
    "FULL",
    "QUICK",
    "ChaosRequest",
    "ChaosTraffic",
    "Finding",
    "HostileScale",
    "KillChaosOutcome",
    "KillDrill",
    "KillReport",
    "OverloadDrill",
    "OverloadOutcome",
    "OverloadReport",
    "SidecarProcess",
    "StoredState",
    "chaos_command",
    "measure_capacity",
    "read_stored_state",
    "run_fuzz_suite",
    "run_hostile",
    "run_kill_chaos",
    "run_overload",
]
