"""A test attributor plugin (loaded with FAULTFINDER_PLUGINS) that answers with what it was
given: the task, ground truth and final answer of the trajectory the worker handed it, so a
test can see that a posted ground truth reaches the attributors."""

from __future__ import annotations

from faultfinder.attributors.base import AttributeOptions, register
from faultfinder.attributors.model import Attribution, Trajectory


@register("echo")
class EchoAttributor:
    name = "echo"

    async def attribute(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
        last = trajectory.steps[-1]
        return Attribution(
            method=self.name,
            agent=last.agent,
            step=last.index,
            reason="echoes the trajectory it was given",
            details={
                "task": trajectory.task,
                "ground_truth": trajectory.ground_truth,
                "final_answer": trajectory.final_answer,
                "steps": len(trajectory.steps),
            },
        )
