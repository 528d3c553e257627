"""`faultfinder bench …`: score attributors, replay datasets as OTLP, load-test ingest."""

from __future__ import annotations

import click


@click.group(name="bench")
def bench() -> None:
    """Benchmarks: score attributors, replay datasets through OTLP, measure ingest."""


def _register() -> None:
    from faultfinder.benchmarks.chaos.command import chaos_command
    from faultfinder.benchmarks.ingest import ingest_command
    from faultfinder.benchmarks.learning_curve import learning_curve_command
    from faultfinder.benchmarks.replay import replay_command
    from faultfinder.benchmarks.run.command import run_command
    from faultfinder.benchmarks.transfer import transfer_command

    bench.add_command(run_command)
    bench.add_command(replay_command)
    bench.add_command(ingest_command)
    bench.add_command(chaos_command)
    bench.add_command(learning_curve_command)
    bench.add_command(transfer_command)


_register()
