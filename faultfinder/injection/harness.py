"""`faultfinder inject run`: labelled failures from a team's own successful runs.

For each task the user's agent program runs once with the replay proxy in front of its
model and its spans going to a sidecar; a run whose final answer is right is recorded.
Then, for each recording, injection attempts: the program runs again, its model calls
before the injection point answered from the recording (a request that differs means
the prefix diverged: the attempt is discarded), the call at that point answered with a
flawed reply of one error mode, the rest live. A run that still succeeds "recovered"
and is discarded; a run that now fails is kept: its outcome is posted to the sidecar,
the step that shows the flawed reply is found in the sidecar's own trajectory of the
run, and the run is labelled there (source `injected`, the mode, the injected text) and
written to `injected.jsonl` in the generic format. A run that fails by itself when
recorded is kept too, in `natural-recordings/`, for `faultfinder verify` to label.

Everything lands in the output folder, one line per finished piece of work, so an
interrupted run continues where it stopped.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from faultfinder.attributors.model import Trajectory
from faultfinder.datasets import dump_record
from faultfinder.evaluation.sidecar import SidecarProcess
from faultfinder.injection.exchanges import Recording, reply_text
from faultfinder.injection.files import Task, append_line, read_lines, read_tasks
from faultfinder.injection.grading import Grader, final_line
from faultfinder.injection.injectors import (
    MODES,
    Injected,
    InjectionContext,
    Injector,
    LLMInjector,
    deterministic_injectors,
    eligible_calls,
)
from faultfinder.injection.labelling import KeptFailure
from faultfinder.injection.locate import LocatedStep, locate_injected_step
from faultfinder.injection.planning import (
    OUTCOMES,
    AttemptPlan,
    corpus_counts,
    spread_attempts,
)
from faultfinder.injection.proxy import ReplayProxy, Session
from faultfinder.injection.sidecar_api import SidecarAPI

__all__ = [
    "OUTCOMES",
    "AttemptPlan",
    "HarnessSettings",
    "InjectionHarness",
    "LocatedStep",
    "Task",
    "locate_injected_step",
    "read_lines",
    "read_tasks",
    "safe_name",
]


@dataclass(frozen=True)
class HarnessSettings:
    program: str
    """The agent program's command line; it reads the task on stdin and prints the final
    answer as its last line."""
    framework: str
    tasks: tuple[Task, ...]
    out: Path
    upstream: str
    """The agents' real model endpoint (OpenAI-compatible, ending in /v1)."""
    api_key: str = "none"
    model: str = "local"
    modes: tuple[str, ...] = tuple(MODES)
    attempts_per_run: int = 6
    seed: int = 0
    timeout_s: float = 900.0
    grader: Grader = field(default_factory=Grader)
    sidecar_url: str | None = None
    """A running sidecar; None starts one on a SQLite file in `out`."""
    sidecar_api_key: str | None = None
    llm_injector: bool = True
    """Plant the modes no deterministic injector makes by asking the model."""


@dataclass
class _Invocation:
    returncode: int | None
    final: str
    stderr: str
    run_id: str | None
    other_runs: list[str]
    seconds: float


class InjectionHarness:
    """Records successful runs, then runs injection attempts (see the module docstring)."""

    def __init__(self, settings: HarnessSettings) -> None:
        self.settings = settings
        out = settings.out
        self.recordings_dir = out / "recordings"
        self.injected_recordings_dir = out / "injected-recordings"
        """Each kept failure's model calls as the proxy answered them (`faultfinder verify`
        replays them with the injected step corrected: the pipeline's own check)."""
        self.natural_recordings_dir = out / "natural-recordings"
        """The model calls of each recorded run that failed by itself (wrong, or crashed
        after it made a run), with its `outcome`: `faultfinder verify` can label them."""
        self.originals_path = out / "originals.jsonl"
        self.attempts_path = out / "attempts.jsonl"
        self.injected_path = out / "injected.jsonl"
        self.summary_path = out / "summary.json"
        self._known_runs: set[str] = set()
        self._sidecar: SidecarAPI | None = None
        self._proxy: ReplayProxy | None = None

    # Set-up -------------------------------------------------------------------------

    @contextmanager
    def running(self) -> Iterator[InjectionHarness]:
        """The proxy and the sidecar (started here unless one was given), for the block."""
        settings = self.settings
        settings.out.mkdir(parents=True, exist_ok=True)
        self.recordings_dir.mkdir(exist_ok=True)
        with ExitStack() as stack:
            url = settings.sidecar_url
            if url is None:
                database = settings.out / "sidecar.db"
                sidecar = SidecarProcess(
                    f"sqlite+aiosqlite:///{database}",
                    settings.out,
                    env={"FAULTFINDER_LOG_LEVEL": "WARNING"},
                )
                stack.enter_context(sidecar)
                url = sidecar.url
            self._sidecar = SidecarAPI(url, settings.sidecar_api_key)
            stack.callback(self._sidecar.close)
            self._known_runs = set(self._sidecar.run_ids_since(0))
            self._proxy = stack.enter_context(
                ReplayProxy(settings.upstream, api_key=settings.api_key).serve()
            )
            yield self

    @property
    def sidecar(self) -> SidecarAPI:
        if self._sidecar is None:
            raise RuntimeError("use `with harness.running():`")
        return self._sidecar

    @property
    def proxy(self) -> ReplayProxy:
        if self._proxy is None:
            raise RuntimeError("use `with harness.running():`")
        return self._proxy

    # One invocation -----------------------------------------------------------------

    def _invoke(self, session: Session, task: Task) -> _Invocation:
        settings = self.settings
        sidecar = self.sidecar.url
        resource = os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
        project = f"faultfinder.project.name=inject-{settings.framework}"
        env = {
            **os.environ,
            "OPENAI_BASE_URL": self.proxy.base_url(session),
            "OPENAI_API_KEY": settings.api_key,
            "FAULTFINDER_AGENT_MODEL": settings.model,
            "OTEL_EXPORTER_OTLP_ENDPOINT": sidecar,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{sidecar}/v1/traces",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_RESOURCE_ATTRIBUTES": f"{resource},{project}" if resource else project,
        }
        if settings.sidecar_api_key:
            env["OTEL_EXPORTER_OTLP_HEADERS"] = f"Authorization=Bearer {settings.sidecar_api_key}"
        started = time.time()
        try:
            done = subprocess.run(
                shlex.split(settings.program),
                input=task.task,
                capture_output=True,
                text=True,
                env=env,
                timeout=settings.timeout_s,
                check=False,
            )
            returncode: int | None = done.returncode
            stdout, stderr = done.stdout, done.stderr
        except subprocess.TimeoutExpired as exc:
            returncode = None
            stdout = exc.stdout if isinstance(exc.stdout, str) else ""
            stderr = f"timed out after {settings.timeout_s:g} s"
        seconds = time.time() - started
        run_id, others = self._new_run(started)
        final = final_line(stdout) if returncode == 0 else ""
        return _Invocation(returncode, final, stderr[-4000:], run_id, others, seconds)

    def _new_run(self, started: float) -> tuple[str | None, list[str]]:
        """The run the invocation produced (the one with the most spans if it made several)."""
        deadline = time.monotonic() + 15
        while True:
            runs = self.sidecar.run_ids_since(started - 5)
            new = {run: spans for run, spans in runs.items() if run not in self._known_runs}
            if new or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        self._known_runs.update(new)
        if not new:
            return None, []
        ordered = sorted(new, key=lambda run: -new[run])
        return ordered[0], ordered[1:]

    # Phase 1: record ----------------------------------------------------------------

    def record(self, on_done: Callable[[Task, str], None] | None = None) -> None:
        """Run every task not yet run once, keeping the successful runs' recordings."""
        done = {item["task_id"] for item in read_lines(self.originals_path)}
        for task in self.settings.tasks:
            if task.id in done:
                continue
            outcome = self._record_one(task)
            if on_done is not None:
                on_done(task, outcome)

    def _record_one(self, task: Task) -> str:
        session = self.proxy.record()
        try:
            invocation = self._invoke(session, task)
        finally:
            self.proxy.close_session(session)
        success = invocation.returncode == 0 and self.settings.grader.correct(
            task.task, task.answer, invocation.final
        )
        outcome = "success" if success else ("crash" if invocation.returncode != 0 else "wrong")
        line: dict[str, Any] = {
            "task_id": task.id,
            "outcome": outcome,
            "final_answer": invocation.final,
            "run_id": invocation.run_id,
            "calls": len(session.calls),
            "seconds": round(invocation.seconds, 1),
        }
        if invocation.returncode != 0:
            line["stderr"] = invocation.stderr[-1000:]
        trajectory = None
        if invocation.run_id is not None:
            self.sidecar.post_outcome(
                invocation.run_id,
                success=success,
                answer=task.answer,
                final=invocation.final,
                reason="recorded run" if success else f"recorded run: {outcome}",
            )
            trajectory = self.sidecar.trajectory(invocation.run_id)
        if invocation.run_id is not None and trajectory is not None:
            failed = {} if success else {"outcome": outcome}
            recording = session.as_recording(
                task_id=task.id,
                framework=self.settings.framework,
                run_id=invocation.run_id,
                final_answer=invocation.final,
                trajectory=trajectory.model_dump(mode="json"),
                **failed,
            )
            folder = self.recordings_dir if success else self.natural_recordings_dir
            recording.save(folder / f"{safe_name(task.id)}.json")
        elif success:
            line["outcome"] = "no_run"
        append_line(self.originals_path, line)
        return str(line["outcome"])

    # Phase 2: inject ----------------------------------------------------------------

    def injectors(self) -> dict[str, Injector]:
        chosen: dict[str, Injector] = {}
        for injector in deterministic_injectors():
            if injector.mode in self.settings.modes:
                chosen[injector.mode] = injector
        if self.settings.llm_injector:
            from faultfinder.injection.injectors import LLM_MODES

            for mode in LLM_MODES:
                if mode in self.settings.modes and mode not in chosen:
                    chosen[mode] = LLMInjector(mode, self._complete)
        return chosen

    def _complete(self, system: str, user: str) -> str:
        settings = self.settings
        answer = httpx.post(
            f"{settings.upstream.rstrip('/')}/chat/completions",
            headers={"Authorization": f"Bearer {settings.api_key}"},
            json={
                "model": settings.model,
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": user},
                ],
                "temperature": 0.7,
                "max_tokens": 400,
            },
            timeout=600,
        )
        answer.raise_for_status()
        return reply_text(answer.json())

    def plan(self) -> list[AttemptPlan]:
        """Attempts for every recording: up to `attempts_per_run` (call, mode) pairs where
        the mode can be planted, spread over the modes, seeded by the task."""
        injectors = self.injectors()
        plans: list[AttemptPlan] = []
        for task in self.settings.tasks:
            path = self.recordings_dir / f"{safe_name(task.id)}.json"
            if not path.exists():
                continue
            recording = Recording.load(path)
            replies = [exchange.reply for exchange in recording.exchanges]
            rng = random.Random(f"{self.settings.seed}:{task.id}")
            by_mode: dict[str, list[int]] = defaultdict(list)
            for call in eligible_calls(replies):
                context = self._context(task, recording, call, random.Random(0))
                for mode, injector in injectors.items():
                    if isinstance(injector, LLMInjector):
                        applicable = bool(reply_text(replies[call]).strip()) and not replies[
                            call
                        ].get("choices", [{}])[0].get("message", {}).get("tool_calls")
                    else:
                        applicable = injector(context) is not None
                    if applicable:
                        by_mode[mode].append(call)
            chosen = spread_attempts(task.id, by_mode, self.settings.attempts_per_run, rng)
            plans.extend(sorted(chosen, key=lambda p: (p.call, p.mode)))
        return plans

    def _context(
        self, task: Task, recording: Recording, call: int, rng: random.Random
    ) -> InjectionContext:
        exchange = recording.exchanges[call]
        return InjectionContext(task.task, task.answer, exchange.request, exchange.reply, rng)

    def finished_attempts(self) -> dict[str, dict[str, Any]]:
        return {item["key"]: item for item in read_lines(self.attempts_path)}

    def inject(
        self,
        plans: Sequence[AttemptPlan],
        on_done: Callable[[AttemptPlan, str], None] | None = None,
    ) -> None:
        done = self.finished_attempts()
        tasks = {task.id: task for task in self.settings.tasks}
        injectors = self.injectors()
        for plan in plans:
            if plan.key in done:
                continue
            outcome = self._attempt(tasks[plan.task_id], plan, injectors[plan.mode])
            if on_done is not None:
                on_done(plan, outcome)

    def _attempt(self, task: Task, plan: AttemptPlan, injector: Injector) -> str:
        recording = Recording.load(self.recordings_dir / f"{safe_name(task.id)}.json")
        rng = random.Random(f"{self.settings.seed}:{plan.key}")
        line: dict[str, Any] = {
            "key": plan.key,
            "task_id": task.id,
            "call": plan.call,
            "mode": plan.mode,
            "framework": self.settings.framework,
            "injector": injector.name,
        }
        try:
            injected = injector(self._context(task, recording, plan.call, rng))
        except httpx.HTTPError as exc:
            line.update(outcome="error", error=f"the injector's model call failed: {exc!r}")
            append_line(self.attempts_path, line)
            return "error"
        if injected is None:
            line["outcome"] = "not_applicable"
            append_line(self.attempts_path, line)
            return "not_applicable"
        line.update(original=injected.original, injected=injected.injected, how=injected.how)
        session = self.proxy.inject(recording, plan.call, injected.reply)
        try:
            invocation = self._invoke(session, task)
        finally:
            self.proxy.close_session(session)
        line.update(
            run_id=invocation.run_id,
            returncode=invocation.returncode,
            final_answer=invocation.final,
            calls=len(session.calls),
            live_calls=sum(1 for call in session.calls if call.source == "model"),
            seconds=round(invocation.seconds, 1),
        )
        outcome = self._judge(task, plan, recording, session, invocation, injected, line)
        line["outcome"] = outcome
        append_line(self.attempts_path, line)
        return outcome

    def _judge(
        self,
        task: Task,
        plan: AttemptPlan,
        recording: Recording,
        session: Session,
        invocation: _Invocation,
        injected: Injected,
        line: dict[str, Any],
    ) -> str:
        if session.diverged_at is not None or not session.injected:
            line["diverged_at"] = session.diverged_at
            if invocation.run_id is not None:
                self.sidecar.post_outcome(
                    invocation.run_id,
                    success=False,
                    answer=task.answer,
                    final=invocation.final,
                    reason="injection attempt discarded: the replayed prefix diverged",
                )
            return "diverged"
        if invocation.run_id is None:
            return "no_run"
        crashed = invocation.returncode != 0
        correct = not crashed and self.settings.grader.correct(
            task.task, task.answer, invocation.final
        )
        reason = f"injected {plan.mode} at model call {plan.call}: {injected.how}" + (
            "; the program then crashed" if crashed else ""
        )
        self.sidecar.post_outcome(
            invocation.run_id,
            success=correct,
            answer=task.answer,
            final=invocation.final,
            reason=("recovered: " + reason) if correct else reason,
        )
        if correct:
            return "recovered"
        trajectory = self.sidecar.trajectory(invocation.run_id)
        original = Trajectory.model_validate(recording.info["trajectory"])
        found = locate_injected_step(trajectory, original, injected)
        line["first_difference"] = found.first_difference
        if found.step is None:
            line["unmapped"] = found.why
            return "unmapped"
        kept = KeptFailure(
            task=task,
            plan=plan,
            framework=self.settings.framework,
            injected=injected,
            reason=reason,
            crashed=crashed,
            recorded_run=recording.info.get("run_id"),
        )
        self.sidecar.label(invocation.run_id, kept.label(trajectory, found.step))
        self.injected_recordings_dir.mkdir(exist_ok=True)
        session.as_recording(
            task_id=task.id,
            framework=self.settings.framework,
            run_id=invocation.run_id,
            final_answer=invocation.final,
            trajectory=trajectory.model_dump(mode="json"),
            injected_call=plan.call,
            label_step=found.step,
        ).save(self.injected_recordings_dir / f"{safe_name(plan.key)}.json")
        record = kept.record(trajectory, found.step, invocation.final)
        with self.injected_path.open("a", encoding="utf-8") as handle:
            handle.write(dump_record(record) + "\n")
        step = trajectory.steps[found.step]
        line["label_step"] = found.step
        line["label_agent"] = step.agent
        return "kept"

    # Figures ------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """Counts like the paper's: per mode, attempts, diverged, recovered, kept."""
        originals = read_lines(self.originals_path)
        attempts = list(self.finished_attempts().values())
        summary = corpus_counts(
            self.settings.framework, len(self.settings.tasks), originals, attempts
        )
        self.summary_path.write_text(json.dumps(summary, indent=2) + "\n")
        return summary


def safe_name(task_id: str) -> str:
    """`task_id` (or an attempt's key) as a file name: what a recording is saved as."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in task_id)
