"""`faultfinder verify`: test an attribution by replaying a failed run with the blamed
step corrected.

Who&When's decisive error is the earliest step whose correction would have made the run
succeed. Where the agent program can run again, that is tested directly: the failed
run's model calls were recorded through the replay proxy; for each candidate step (the
attributors' top-k, or steps the user names) a corrected reply is written, the program
runs again with its calls before that step's model call answered from the recording
(a request that differs means the prefix diverged), that call answered with the
correction and later calls live (temperature 0 unless told otherwise), and the
program's own grader judges the answer: `flipped`, `still_failed` or `diverged`.

Each candidate's replays, their continuations included, are written to
`OUT/step-N.jsonl` when the candidate is done; a candidate whose file exists is not run
again. The verification is then posted to the sidecar, which stores it as the run's
attribution of method `counterfactual`. Searching for the earliest decisive step
(`search="earliest"`) tries candidates by position and stops at the first that flips,
whose agent and step are written to `OUT/label.json`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from faultfinder.attributors.model import Trajectory
from faultfinder.injection.corrections import Corrector, corrected_reply, request_tools
from faultfinder.injection.exchanges import Recording
from faultfinder.injection.files import read_lines
from faultfinder.injection.grading import Grader
from faultfinder.injection.proxy import ReplayProxy
from faultfinder.injection.replay_run import run_program
from faultfinder.injection.sidecar_api import SidecarAPI
from faultfinder.injection.step_calls import model_calls_of_steps
from faultfinder.server.verifications import COUNTERFACTUAL

__all__ = [
    "CandidateResult",
    "Verification",
    "VerifySettings",
    "attributed_candidates",
    "candidate_result",
]


@dataclass(frozen=True)
class VerifySettings:
    program: str
    """The agent program's command line: the task on stdin, the final answer last on stdout."""
    recording: Path
    """The failed run's model calls, recorded through the replay proxy."""
    run_id: str
    """The failed run in the sidecar (its trajectory, attributions and ground truth)."""
    sidecar_url: str
    upstream: str
    """The agents' model endpoint, for the live continuation."""
    out: Path
    task: str
    """Exactly what the program read on stdin when it was recorded."""
    answer: str | None = None
    """The right answer; None: the run's posted ground truth."""
    api_key: str = "none"
    model: str = "local"
    sidecar_api_key: str | None = None
    steps: tuple[int, ...] = ()
    """Candidates the user names; empty: the attributors' top-k (or, searching for the
    earliest, every step a model call made)."""
    corrections: Mapping[int, str] = field(default_factory=dict)
    top_k: int = 3
    repeats: int = 1
    temperature: float | None = 0.0
    """The live continuation's temperature; None keeps the program's own."""
    search: str = "all"
    """`all`: every candidate in ranking order; `earliest`: in order of position, stopping
    at the first whose correction flips the run."""
    grader: Grader = field(default_factory=Grader)
    timeout_s: float = 900.0
    post: bool = True


@dataclass(frozen=True)
class CandidateResult:
    step: int
    agent: str
    result: str
    """flipped, still_failed, diverged, unmapped or error."""
    model_call: int | None = None
    replays: int = 0
    """Replays that reached the corrected call."""
    flips: int = 0
    correction: str | None = None
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "agent": self.agent,
            "result": self.result,
            "model_call": self.model_call,
            "replays": self.replays,
            "flips": self.flips,
            "correction": self.correction,
        }


def candidate_result(lines: Sequence[Mapping[str, Any]]) -> str:
    """A candidate's result from its replays' outcomes: flipped when most replays that
    reached the corrected step succeeded, diverged when none reached it."""
    reached = [line for line in lines if line.get("outcome") in ("flipped", "still_failed")]
    if not reached:
        return str(lines[0].get("outcome", "error")) if lines else "error"
    flips = sum(1 for line in reached if line["outcome"] == "flipped")
    return "flipped" if 2 * flips > len(reached) else "still_failed"


def attributed_candidates(attributions: Sequence[Mapping[str, Any]], top_k: int) -> list[int]:
    """The steps the stored attributions blame, best first: each ok attribution's step
    and then its ranked candidates, up to `top_k` per attribution, taken in turns."""
    ranked: list[list[int]] = []
    for answer in attributions:
        if answer.get("status") != "ok" or answer.get("method") == COUNTERFACTUAL:
            continue
        steps = [answer["step"]] if isinstance(answer.get("step"), int) else []
        steps += [c["step"] for c in answer.get("candidates") or [] if isinstance(c, dict)]
        ranked.append(list(dict.fromkeys(steps))[:top_k])
    chosen: list[int] = []
    for position in range(top_k):
        for steps in ranked:
            if position < len(steps) and steps[position] not in chosen:
                chosen.append(steps[position])
    return chosen


class Verification:
    """One failed run's candidates, replayed with each corrected (see the module docstring)."""

    def __init__(
        self,
        settings: VerifySettings,
        corrector: Corrector | None,
        *,
        on_start: Callable[[int], None] | None = None,
        on_candidate: Callable[[CandidateResult], None] | None = None,
    ) -> None:
        self.settings = settings
        self.corrector = corrector
        self.on_start = on_start
        """Called with a candidate's step before it is replayed (not when it was done before)."""
        self.on_candidate = on_candidate
        self.recording = Recording.load(settings.recording)

    # What is verified ---------------------------------------------------------------

    def candidates(
        self, attributions: Sequence[Mapping[str, Any]], calls: Mapping[int, int]
    ) -> list[int]:
        settings = self.settings
        named = list(dict.fromkeys([*settings.steps, *settings.corrections]))
        if named:
            steps = named
        elif settings.search == "earliest":
            steps = sorted(calls)
        else:
            steps = attributed_candidates(attributions, settings.top_k)
        return sorted(steps) if settings.search == "earliest" else steps

    # Running ------------------------------------------------------------------------

    @contextmanager
    def _proxy(self) -> Iterator[ReplayProxy]:
        settings = self.settings
        sampling = {} if settings.temperature is None else {"temperature": settings.temperature}
        proxy = ReplayProxy(settings.upstream, api_key=settings.api_key, sampling=sampling)
        with proxy.serve() as serving:
            yield serving

    def run(self) -> dict[str, Any]:
        """Verify every candidate not yet verified, post the verification, and return it."""
        settings = self.settings
        settings.out.mkdir(parents=True, exist_ok=True)
        sidecar = SidecarAPI(settings.sidecar_url, settings.sidecar_api_key)
        try:
            detail = self._run_detail(sidecar)
            trajectory = Trajectory.model_validate(detail["trajectory"])
            answer = settings.answer or trajectory.ground_truth or ""
            if not answer and settings.grader.command is None:
                raise ValueError(
                    "no answer to grade against: pass --answer, or post the run's outcome"
                    " with its ground truth"
                )
            calls = model_calls_of_steps(trajectory, self.recording)
            steps = self.candidates(detail.get("attributions") or [], calls)
            if not steps:
                raise ValueError("no candidate steps: name some with --step")
            results = self._verify(trajectory, answer, calls, steps)
            summary: dict[str, Any] = {
                "run_id": settings.run_id,
                "search": settings.search,
                "candidates": [result.as_json() for result in results],
            }
            if detail.get("from_recording"):
                summary["trajectory_from"] = "recording"
            elif settings.post:
                summary["attribution"] = self._posted(summary) or sidecar.post_verification(
                    settings.run_id,
                    {
                        "candidates": summary["candidates"],
                        "search": settings.search,
                        "model": settings.model,
                    },
                )
        finally:
            sidecar.close()
        (settings.out / "verification.json").write_text(json.dumps(summary, indent=2) + "\n")
        flipped = [r for r in results if r.result == "flipped"]
        if settings.search == "earliest" and flipped:
            label = {
                "run_id": settings.run_id,
                "agent": flipped[0].agent,
                "step": flipped[0].step,
                "method": COUNTERFACTUAL,
                "reason": f"the earliest step whose correction made the run succeed"
                f" ({flipped[0].flips} of {flipped[0].replays} replays)",
            }
            (settings.out / "label.json").write_text(json.dumps(label, indent=2) + "\n")
        return summary

    def _run_detail(self, sidecar: SidecarAPI) -> dict[str, Any]:
        """The run as the sidecar has it; or, where the sidecar does not know the run (its
        database was not kept), the trajectory the recording kept of this very run, with
        no attributions (candidates must then be named) and nothing to post it to."""
        try:
            return sidecar.run(self.settings.run_id)
        except httpx.HTTPStatusError as error:
            kept = self.recording.info.get("trajectory")
            if error.response.status_code != 404 or not isinstance(kept, dict):
                raise
            if kept.get("run_id") != self.settings.run_id:
                raise
            return {"trajectory": kept, "attributions": [], "from_recording": True}

    def _posted(self, summary: Mapping[str, Any]) -> dict[str, Any] | None:
        """The attribution an earlier run of the same verification stored, if it did (a
        finished verification run again is not posted twice)."""
        path = self.settings.out / "verification.json"
        if not path.exists():
            return None
        earlier = json.loads(path.read_text())
        same = all(earlier.get(key) == summary[key] for key in ("run_id", "search", "candidates"))
        posted = earlier.get("attribution")
        return posted if same and isinstance(posted, dict) else None

    def _verify(
        self, trajectory: Trajectory, answer: str, calls: Mapping[int, int], steps: Sequence[int]
    ) -> list[CandidateResult]:
        results: list[CandidateResult] = []
        with self._proxy() as proxy:
            for step in steps:
                if not 0 <= step < len(trajectory):
                    raise ValueError(f"step {step} is outside 0..{len(trajectory) - 1}")
                result = self._candidate(proxy, trajectory, answer, calls, step)
                results.append(result)
                if self.on_candidate is not None:
                    self.on_candidate(result)
                if self.settings.search == "earliest" and result.result == "flipped":
                    break
        return results

    def _candidate(
        self,
        proxy: ReplayProxy,
        trajectory: Trajectory,
        answer: str,
        calls: Mapping[int, int],
        step: int,
    ) -> CandidateResult:
        path = self.settings.out / f"step-{step}.jsonl"
        agent = trajectory.steps[step].agent
        if not path.exists():
            if self.on_start is not None:
                self.on_start(step)
            lines = self._replays(proxy, trajectory, answer, calls.get(step), step)
            partial = path.with_name(path.name + ".partial")
            partial.write_text("".join(json.dumps(line) + "\n" for line in lines))
            partial.replace(path)
        lines = read_lines(path)
        reached = [line for line in lines if line.get("outcome") in ("flipped", "still_failed")]
        return CandidateResult(
            step=step,
            agent=agent,
            result=candidate_result(lines),
            model_call=lines[0].get("model_call") if lines else None,
            replays=len(reached),
            flips=sum(1 for line in reached if line["outcome"] == "flipped"),
            correction=lines[0].get("correction") if lines else None,
            note=str(lines[0].get("note", "")) if lines else "",
        )

    def _replays(
        self,
        proxy: ReplayProxy,
        trajectory: Trajectory,
        answer: str,
        call: int | None,
        step: int,
    ) -> list[dict[str, Any]]:
        """The candidate's replays as output lines (one line when it cannot be replayed)."""
        base = {"step": step, "agent": trajectory.steps[step].agent, "model_call": call}
        if call is None:
            return [{**base, "outcome": "unmapped", "note": "no recorded model call made it"}]
        exchange = self.recording.exchanges[call]
        reply, tools = exchange.reply, request_tools(exchange.request)
        correction = self.settings.corrections.get(step)
        if correction is None:
            if self.corrector is None:
                return [{**base, "outcome": "error", "note": "no correction was given"}]
            try:
                correction = self.corrector(trajectory, step, reply, exchange.request)
            except httpx.HTTPError as exc:
                return [{**base, "outcome": "error", "note": f"the corrector failed: {exc!r}"}]
            if not correction:
                return [{**base, "outcome": "error", "note": "the corrector wrote nothing"}]
        base["correction"] = correction
        corrected = corrected_reply(reply, correction, tools)
        lines = []
        for repeat in range(self.settings.repeats):
            line = self._replay(proxy, corrected, call, answer)
            lines.append({**base, "repeat": repeat, **line})
            if line["outcome"] == "diverged":
                break  # the prefix is replayed exactly: it diverges every time
        return lines

    def _replay(
        self, proxy: ReplayProxy, corrected: dict[str, Any], call: int, answer: str
    ) -> dict[str, Any]:
        settings = self.settings
        session = proxy.inject(self.recording, call, corrected)
        try:
            ran = run_program(
                settings.program,
                settings.task,
                base_url=proxy.base_url(session),
                answer=answer,
                grader=settings.grader,
                api_key=settings.api_key,
                model=settings.model,
                timeout_s=settings.timeout_s,
            )
        finally:
            proxy.close_session(session)
        if session.diverged_at is not None or not session.injected:
            outcome = "diverged"
        else:
            outcome = "flipped" if ran.success else "still_failed"
        return {
            "outcome": outcome,
            "final_answer": ran.final,
            "returncode": ran.returncode,
            "seconds": round(ran.seconds, 1),
            "diverged_at": session.diverged_at,
            "divergence": session.divergence,
            "stderr": ran.stderr[-1000:] if ran.returncode != 0 else "",
            "continuation": [exchange.as_json() for exchange in session.calls[call:]],
        }
