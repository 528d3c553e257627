"""`faultfinder inject run` and `faultfinder inject proxy` (the group is
`faultfinder.cli.inject`): labelled failures made from a team's own successful runs.

    faultfinder inject run --program "python team.py" --tasks tasks.jsonl \\
        --framework langgraph --upstream http://127.0.0.1:8080/v1 --out inject-out/
    faultfinder inject proxy --upstream http://127.0.0.1:8080/v1 --recordings recordings/
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from pathlib import Path

import click
from rich.console import Console

from faultfinder.evaluation.run.models import terminate_cleanly
from faultfinder.injection.grading import Grader, GraderError
from faultfinder.injection.harness import (
    AttemptPlan,
    HarnessSettings,
    InjectionHarness,
    Task,
    read_lines,
    read_tasks,
)
from faultfinder.injection.injectors import MODES
from faultfinder.injection.proxy import ReplayProxy
from faultfinder.server.progress import Progress

__all__ = ["proxy_command", "run_command"]


def _modes(value: str) -> tuple[str, ...]:
    modes = tuple(mode.strip() for mode in value.split(",") if mode.strip())
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown or not modes:
        raise click.BadParameter(
            f"unknown modes {', '.join(unknown) or value!r}; valid: {', '.join(MODES)}",
            param_hint="'--modes'",
        )
    return modes


@click.command("run")
@click.option("--program", required=True, help="The agent program's command line (task on stdin,"
              " final answer as the last line of stdout).")  # fmt: skip
@click.option(
    "--tasks", "tasks_file", required=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help='JSON Lines of {"id", "task", "answer"}.',
)  # fmt: skip
@click.option("--framework", required=True, help="The program's framework (the records' subset).")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output folder; rerun with the same folder to continue.")  # fmt: skip
@click.option("--upstream", required=True, envvar="OPENAI_BASE_URL",
              help="The agents' model endpoint, ending in /v1 ($OPENAI_BASE_URL).")  # fmt: skip
@click.option("--api-key", envvar="OPENAI_API_KEY", default="none", show_default=True,
              help="The model endpoint's key ($OPENAI_API_KEY).")  # fmt: skip
@click.option("--model", default="local", show_default=True,
              help="Model name the program and the injector use.")  # fmt: skip
@click.option("--modes", default=",".join(MODES), show_default=True, help="Error modes to plant.")
@click.option("--attempts-per-run", type=click.IntRange(min=1), default=6, show_default=True,
              help="Injection attempts per recorded successful run.")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N tasks.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=900,
              show_default=True, help="Seconds one program run may take.")  # fmt: skip
@click.option("--grader", help="A command that reads {task, answer, final_answer} as JSON on"
              " stdin and exits 0 (correct) or 1 (wrong); default: exact answers.")  # fmt: skip
@click.option("--sidecar", "sidecar_url", help="A running sidecar's URL (default: start one on"
              " a SQLite file in --out).")  # fmt: skip
@click.option("--sidecar-api-key", envvar="FAULTFINDER_API_KEY", help="$FAULTFINDER_API_KEY.")
@click.option("--llm-injector/--no-llm-injector", default=True, show_default=True,
              help="Ask the model to plant the modes no deterministic injector makes.")  # fmt: skip
@click.option("--record-only", is_flag=True, help="Only record the runs (a failed one is kept"
              " in OUT/natural-recordings/ for `faultfinder verify`).")  # fmt: skip
def run_command(
    program: str,
    tasks_file: Path,
    framework: str,
    out: Path,
    upstream: str,
    api_key: str,
    model: str,
    modes: str,
    attempts_per_run: int,
    seed: int,
    limit: int | None,
    timeout_s: float,
    grader: str | None,
    sidecar_url: str | None,
    sidecar_api_key: str | None,
    llm_injector: bool,
    record_only: bool,
) -> None:
    """Record the program's successful runs, then inject flaws and keep the failures as
    labelled runs (in the sidecar, and in OUT/injected.jsonl in the generic format).

    Resumable: finished recordings and attempts are skipped when rerun with the same OUT.
    """
    try:
        tasks = read_tasks(tasks_file)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if limit is not None:
        tasks = tasks[:limit]
    settings = HarnessSettings(
        program=program,
        framework=framework,
        tasks=tuple(tasks),
        out=out,
        upstream=upstream,
        api_key=api_key,
        model=model,
        modes=_modes(modes),
        attempts_per_run=attempts_per_run,
        seed=seed,
        timeout_s=timeout_s,
        grader=Grader(grader),
        sidecar_url=sidecar_url,
        sidecar_api_key=sidecar_api_key,
        llm_injector=llm_injector,
    )
    harness = InjectionHarness(settings)
    console = Console(stderr=True)
    # One line per model call and API request would bury the progress lines.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        # A kill (SIGTERM) unwinds like Ctrl-C: the program and the sidecar are stopped.
        with terminate_cleanly(), harness.running(), Progress(console=console) as progress:
            _record(harness, progress, tasks)
            if not record_only:
                _inject(harness, progress)
    except GraderError as exc:
        raise click.ClickException(str(exc)) from None
    summary = harness.summary()
    click.echo(json.dumps(summary, indent=2))


def _record(harness: InjectionHarness, progress: Progress, tasks: list[Task]) -> None:
    counts: Counter[str] = Counter()
    task = progress.add_task("recording", total=len(tasks))
    done = len(tasks) - sum(
        1 for t in tasks if t.id not in {line["task_id"] for line in _originals(harness)}
    )
    progress.update(task, completed=done)

    def on_done(_: Task, outcome: str) -> None:
        counts[outcome] += 1
        progress.update(
            task,
            advance=1,
            description="recording " + ", ".join(f"{k} {v}" for k, v in counts.items()),
        )

    harness.record(on_done)


def _originals(harness: InjectionHarness) -> list[dict[str, object]]:
    return read_lines(harness.originals_path)


def _inject(harness: InjectionHarness, progress: Progress) -> None:
    plans = harness.plan()
    finished = harness.finished_attempts()
    counts: Counter[str] = Counter(item["outcome"] for item in finished.values())
    task = progress.add_task("injecting", total=len(plans))
    progress.update(task, completed=sum(1 for plan in plans if plan.key in finished))
    started = time.monotonic()

    def on_done(_: AttemptPlan, outcome: str) -> None:
        counts[outcome] += 1
        shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        progress.update(task, advance=1, description=f"injecting ({shown})")

    harness.inject(plans, on_done)
    progress.console.print(f"injection attempts done in {time.monotonic() - started:.0f} s")


@click.command("proxy")
@click.option("--upstream", required=True, envvar="OPENAI_BASE_URL",
              help="The model endpoint, ending in /v1 ($OPENAI_BASE_URL).")  # fmt: skip
@click.option("--api-key", envvar="OPENAI_API_KEY", default="none", show_default=True)
@click.option("--recordings", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the recordings: session NAME is saved as NAME.json.")  # fmt: skip
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8090, show_default=True)
def proxy_command(upstream: str, api_key: str, recordings: Path, host: str, port: int) -> None:
    """Serve the replay proxy in record mode: point a program's OpenAI base URL at
    http://HOST:PORT/s/NAME/v1 and each model call is forwarded and saved to
    RECORDINGS/NAME.json (streaming and tool calls included). Ctrl-C stops it."""
    recordings.mkdir(parents=True, exist_ok=True)
    proxy = ReplayProxy(upstream, api_key=api_key, record_dir=recordings)
    with proxy.serve(host, port):
        click.echo(f"recording proxy on http://{host}:{port}/s/<name>/v1 → {upstream}", err=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            click.echo("stopped", err=True)
