"""The injection pipeline's own check: `faultfinder inject flip-rate`.

An injected failure is labelled with the step that shows the planted flaw. If the label
is right, correcting that step should make the run succeed again. `data/corpus/flips.sh`
keeps each kept failure's model calls (`OUT/injected-recordings/`) and replays it with the
labelled step corrected (`faultfinder verify --step N`, the model writing the correction
without seeing the original text); this counts how many then succeed, by mode and by
injector, beside the ones that could not be replayed.

    faultfinder inject flip-rate --out data/corpus/flips/runs/langgraph
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import click

from faultfinder.injection.exchanges import Recording
from faultfinder.injection.harness import read_lines, safe_name

__all__ = ["flip_rate", "flips_command"]

RESULTS = ("flipped", "still_failed", "diverged", "unmapped", "no_correction", "pending")


def _result(verification: dict[str, Any] | None, step: int) -> str:
    if verification is None:
        return "pending"
    for candidate in verification.get("candidates") or []:
        if isinstance(candidate, dict) and candidate.get("step") == step:
            return str(candidate.get("result") or "no_correction")
    return "no_correction"


def _rate(counts: dict[str, int]) -> dict[str, Any]:
    tested = counts.get("flipped", 0) + counts.get("still_failed", 0)
    return {
        **{result: counts.get(result, 0) for result in RESULTS if counts.get(result)},
        "tested": tested,
        "flip_rate": round(counts.get("flipped", 0) / tested, 3) if tested else None,
    }


def flip_rate(out: Path) -> dict[str, Any]:
    """Per kept failure under `out` (an `inject run --out` folder): whether correcting its
    labelled step made it succeed; the rate overall, by mode and by injector. The rate is
    over the failures that were replayed to the end (flipped or still failed)."""
    attempts = {safe_name(line["key"]): line for line in read_lines(out / "attempts.jsonl")}
    failures = []
    for path in sorted((out / "injected-recordings").glob("*.json")):
        info = Recording.load(path).info
        step = int(info["label_step"])
        verification = out / "verify" / path.stem / "verification.json"
        loaded = json.loads(verification.read_text()) if verification.exists() else None
        attempt = attempts.get(path.stem, {})
        failures.append(
            {
                "key": path.stem,
                "mode": attempt.get("mode"),
                "injector": attempt.get("injector"),
                "label_step": step,
                "result": _result(loaded, step),
            }
        )
    overall: dict[str, int] = defaultdict(int)
    by_mode: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    by_injector: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for failure in failures:
        result = str(failure["result"])
        overall[result] += 1
        by_mode[str(failure["mode"])][result] += 1
        by_injector[str(failure["injector"])][result] += 1
    return {
        "kept_failures": len(failures),
        **_rate(overall),
        "by_mode": {mode: _rate(counts) for mode, counts in sorted(by_mode.items())},
        "by_injector": {name: _rate(counts) for name, counts in sorted(by_injector.items())},
        "failures": failures,
    }


@click.command("flip-rate")
@click.option("--out", required=True,
              type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="The `inject run --out` folder (injected-recordings/, verify/).")  # fmt: skip
def flips_command(out: Path) -> None:
    """Count the kept injected failures that correcting their labelled step made succeed
    (OUT/verify/<key>/verification.json, from `faultfinder verify --step N`), and print
    the rate overall, by mode and by injector as JSON."""
    found = flip_rate(out)
    click.echo(
        f"{out}: {found['kept_failures']} kept failures, {found['tested']} replayed to the end,"
        f" {found.get('flipped', 0)} flipped (rate {found['flip_rate']})",
        err=True,
    )
    click.echo(json.dumps(found, indent=2))
