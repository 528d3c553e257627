"""`faultfinder verify`: replay a failed run with a candidate step corrected and report,
per candidate, whether the run then succeeds (`faultfinder.injection.verify`).

    faultfinder verify --program "python team.py" --recording rec/failed.json \\
        --run RUN_ID --sidecar http://127.0.0.1:4318 --upstream http://127.0.0.1:8080/v1 \\
        --task-file task.txt --out verify-out/
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click
import httpx

from faultfinder.injection.corrections import Corrector, complete_with, parse_corrections
from faultfinder.injection.grading import Grader, GraderError
from faultfinder.injection.verify import CandidateResult, Verification, VerifySettings

__all__ = ["verify_command"]


def _task(task: str | None, task_file: Path | None) -> str:
    if (task is None) == (task_file is None):
        raise click.UsageError("give the program's task with exactly one of --task, --task-file")
    # The program read the task on stdin: the bytes must be the recorded run's exactly.
    return task if task is not None else task_file.read_text()  # type: ignore[union-attr]


def _show(result: CandidateResult) -> None:
    where = f"step {result.step} ({result.agent}"
    where += f", model call {result.model_call})" if result.model_call is not None else ")"
    shown = result.result.replace("_", " ")
    if result.replays:
        shown += f" ({result.flips} of {result.replays} replays succeeded)"
    if result.note:
        shown += f": {result.note}"
    click.echo(f"{where}: {shown}", err=True)


@click.command("verify")
@click.option("--program", required=True, help="The agent program's command line (task on stdin,"
              " final answer as the last line of stdout).")  # fmt: skip
@click.option("--recording", required=True,
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="The failed run's model calls, recorded through the replay proxy.")  # fmt: skip
@click.option(
    "--run",
    "run_id",
    required=True,
    help="The failed run's id in the sidecar (where the sidecar does not have it, the"
    " trajectory the recording kept of it is used and nothing is posted).",
)
@click.option("--sidecar", "sidecar_url", required=True, help="The sidecar's URL.")
@click.option("--sidecar-api-key", envvar="FAULTFINDER_API_KEY", help="$FAULTFINDER_API_KEY.")
@click.option("--upstream", required=True, envvar="OPENAI_BASE_URL",
              help="The agents' model endpoint, ending in /v1 ($OPENAI_BASE_URL).")  # fmt: skip
@click.option("--api-key", envvar="OPENAI_API_KEY", default="none", show_default=True)
@click.option("--model", default="local", show_default=True,
              help="Model name the program and the corrector use.")  # fmt: skip
@click.option("--task", help="The task the program read on stdin when it was recorded.")
@click.option("--task-file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="A file holding that task exactly.")  # fmt: skip
@click.option("--answer", help="The right answer (default: the run's posted ground truth).")
@click.option("--step", "steps", type=click.IntRange(min=0), multiple=True,
              help="A candidate step (repeatable; default: the attributors' top-k).")  # fmt: skip
@click.option("--correction", "corrections", multiple=True, metavar="N=TEXT",
              help="Step N corrected to TEXT (for a tool call: its arguments as JSON)."
              " Steps without one are corrected by the model.")  # fmt: skip
@click.option("--top-k", type=click.IntRange(min=1), default=3, show_default=True,
              help="Candidates taken from each stored attribution.")  # fmt: skip
@click.option("--repeats", type=click.IntRange(min=1, max=100), default=1, show_default=True,
              help="Replays per candidate (a flip rate).")  # fmt: skip
@click.option("--temperature", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Temperature of the live continuation and the corrector.")  # fmt: skip
@click.option("--keep-sampling", is_flag=True,
              help="Leave the program's own sampling settings on its live calls.")  # fmt: skip
@click.option("--search", type=click.Choice(["all", "earliest"]), default="all",
              show_default=True, help="earliest: try candidates by position (every model-made"
              " step unless named) and stop at the first that flips: a label.")  # fmt: skip
@click.option("--grader", help="A command that reads {task, answer, final_answer} as JSON on"
              " stdin and exits 0 (correct) or 1 (wrong); default: exact answers.")  # fmt: skip
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=900,
              show_default=True, help="Seconds one program run may take.")  # fmt: skip
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output folder (OUT/step-N.jsonl per candidate); rerun to go on.")  # fmt: skip
@click.option("--no-post", is_flag=True, help="Do not store the result in the sidecar.")
def verify_command(
    program: str,
    recording: Path,
    run_id: str,
    sidecar_url: str,
    sidecar_api_key: str | None,
    upstream: str,
    api_key: str,
    model: str,
    task: str | None,
    task_file: Path | None,
    answer: str | None,
    steps: tuple[int, ...],
    corrections: tuple[str, ...],
    top_k: int,
    repeats: int,
    temperature: float,
    keep_sampling: bool,
    search: str,
    grader: str | None,
    timeout_s: float,
    out: Path,
    no_post: bool,
) -> None:
    """Test an attribution: replay the failed run's exact prefix with a candidate step
    corrected, let the agents continue live, and grade the answer. Per candidate:
    flipped, still failed or diverged; stored in the sidecar as the run's `counterfactual`
    attribution. Resumable: candidates whose OUT/step-N.jsonl exists are not run again."""
    try:
        written = parse_corrections(corrections)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--correction'") from None
    settings = VerifySettings(
        program=program,
        recording=recording,
        run_id=run_id,
        sidecar_url=sidecar_url,
        upstream=upstream,
        out=out,
        task=_task(task, task_file),
        answer=answer,
        api_key=api_key,
        model=model,
        sidecar_api_key=sidecar_api_key,
        steps=steps,
        corrections=written,
        top_k=top_k,
        repeats=repeats,
        temperature=None if keep_sampling else temperature,
        search=search,
        grader=Grader(grader),
        timeout_s=timeout_s,
        post=not no_post,
    )
    corrector = Corrector(
        complete_with(upstream, api_key=api_key, model=model, temperature=temperature)
    )
    # One line per model call would bury the per-candidate lines.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        verification = Verification(
            settings,
            corrector,
            on_start=lambda step: click.echo(f"step {step}: correcting and replaying…", err=True),
            on_candidate=_show,
        )
        summary = verification.run()
    except (ValueError, GraderError) as exc:
        raise click.ClickException(str(exc)) from None
    except httpx.HTTPError as exc:
        raise click.ClickException(f"the sidecar at {sidecar_url} failed: {exc!r}") from None
    click.echo(json.dumps(summary, indent=2))
