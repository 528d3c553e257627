"""What `faultfinder inject run` keeps of an injection attempt that made the run fail:
the label posted to the sidecar on the step that shows the flaw, and the same run as a
record of the generic format (`injected.jsonl`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from faultfinder.attributors.model import Trajectory
from faultfinder.datasets import BenchmarkRecord, GoldLabel
from faultfinder.injection.files import Task
from faultfinder.injection.injectors import Injected
from faultfinder.injection.planning import AttemptPlan

__all__ = ["INJECTED_DATASET", "KeptFailure"]

INJECTED_DATASET = "faultfinder-injected"
"""`dataset` of the records the harness writes."""


@dataclass(frozen=True)
class KeptFailure:
    """A run that failed after one planted flaw, and what is known of how it was made."""

    task: Task
    plan: AttemptPlan
    framework: str
    injected: Injected
    reason: str
    """Why the run failed, as posted with its outcome."""
    crashed: bool
    """The program exited with an error after the injection."""
    recorded_run: Any
    """The id of the successful run whose prefix was replayed, as its recording keeps it."""

    def details(self) -> dict[str, Any]:
        """How the flaw was made, kept with the label and the record."""
        return {
            "mode": self.plan.mode,
            "model_call": self.plan.call,
            "injector": self.injected.injector,
            "how": self.injected.how,
            "original": self.injected.original,
            "injected": self.injected.injected,
            "task_id": self.task.id,
            "framework": self.framework,
            "crashed": self.crashed,
            "recorded_run": self.recorded_run,
        }

    def label(self, trajectory: Trajectory, step: int) -> dict[str, Any]:
        """The label posted to the sidecar: `step` and its agent, source `injected`."""
        return {
            "agent": trajectory.steps[step].agent,
            "step": step,
            "reason": self.reason,
            "author": "faultfinder inject",
            "mode": self.plan.mode,
            "source": "injected",
            "details": self.details(),
        }

    def record(self, trajectory: Trajectory, step: int, final: str) -> BenchmarkRecord:
        """The run as a labelled record; `final` is the program's own final answer."""
        return BenchmarkRecord(
            dataset=INJECTED_DATASET,
            subset=self.framework,
            record_id=f"{self.framework}/{self.plan.key}",
            trajectory=trajectory.model_copy(
                update={
                    "metadata": {**trajectory.metadata, "framework": self.framework},
                    "ground_truth": self.task.answer,
                    "final_answer": final or trajectory.final_answer,
                }
            ),
            gold=GoldLabel(
                agent=trajectory.steps[step].agent,
                step=step,
                reason=self.reason,
                mode=self.plan.mode,
                source="injected",
            ),
            details=self.details(),
        )
