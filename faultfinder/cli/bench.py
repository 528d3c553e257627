"""`faultfinder bench …`: score attributors, replay datasets as OTLP, load-test ingest,
drill the sidecar under failure, run the nightly suite and read its history.

Each subcommand lives with the part it belongs to (`faultfinder.evaluation`,
`faultfinder.training`, `faultfinder.drills`) and is imported only when it runs.
"""

from __future__ import annotations

import click

from faultfinder.cli.lazy import LazyGroup

__all__ = ["bench"]


@click.group(
    name="bench",
    cls=LazyGroup,
    lazy={
        "run": (
            "faultfinder.evaluation.run.command:run_command",
            "Score an attributor on a labelled dataset (accuracy, ±k, official-script, cost).",
        ),
        "replay": (
            "faultfinder.evaluation.replay.command:replay_command",
            "Replay a benchmark dataset as OTLP traces (one trace per record) into a receiver.",
        ),
        "transfer": (
            "faultfinder.evaluation.transfer:transfer_command",
            "Leave-one-framework-out accuracy per framework and error mode (see the module).",
        ),
        "nightly": (
            "faultfinder.evaluation.nightly.command:nightly_command",
            "Run the nightly benchmark suite, keep its history and gate on regressions.",
        ),
        "history": (
            "faultfinder.evaluation.nightly.command:history_group",
            "The nightly benchmark's history: list it, export it as JSON Lines, accept an entry.",
        ),
        "learning-curve": (
            "faultfinder.training.learning_curve:learning_curve_command",
            "Held-out accuracy of the learned attributor against the number of labelled runs"
            " (Who&When's, or with --from-database a sidecar's own labelled runs as well).",
        ),
        "ingest": (
            "faultfinder.drills.ingest.command:ingest_command",
            "Load-test OTLP/HTTP ingest with realistic multi-agent traces (≈2.5 KB per span).",
        ),
        "chaos": (
            "faultfinder.drills.chaos.command:chaos_command",
            "Kill the sidecar under load and overload it; count what was acknowledged and stored.",
        ),
        "attribution-latency": (
            "faultfinder.drills.attribution_latency:attribution_latency_command",
            "Time from a posted failure to the stored attribution, on a real sidecar.",
        ),
    },
)
def bench() -> None:
    """Benchmarks: score attributors, replay datasets through OTLP, measure ingest."""
