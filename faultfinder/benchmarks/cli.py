"""`faultfinder bench …`: score attributors, replay datasets as OTLP, load-test ingest, run
the nightly suite and read its history."""

from __future__ import annotations

import click


@click.group(name="bench")
def bench() -> None:
    """Benchmarks: score attributors, replay datasets through OTLP, measure ingest."""


def _register() -> None:
    from faultfinder.benchmarks.attribution_latency import attribution_latency_command
    from faultfinder.benchmarks.chaos.command import chaos_command
    from faultfinder.benchmarks.ingest import ingest_command
    from faultfinder.benchmarks.learning_curve import learning_curve_command
    from faultfinder.benchmarks.nightly import history_group, nightly_command
    from faultfinder.benchmarks.replay import replay_command
    from faultfinder.benchmarks.run.command import run_command
    from faultfinder.benchmarks.transfer import transfer_command

    bench.add_command(run_command)
    bench.add_command(replay_command)
    bench.add_command(ingest_command)
    bench.add_command(chaos_command)
    bench.add_command(learning_curve_command)
    bench.add_command(transfer_command)
    bench.add_command(nightly_command)
    bench.add_command(history_group)
    bench.add_command(attribution_latency_command)


_register()
