"""A test attributor plugin (loaded with FAULTFINDER_PLUGINS) that records every execution.

Each call appends `<run_id> <pid>` to the file named by FAULTFINDER_TEST_EXECUTIONS and
sleeps FAULTFINDER_TEST_SLEEP seconds first, so tests can count executions across
processes and kill a worker in the middle of a job.
"""

from __future__ import annotations

import asyncio
import os

from faultfinder.attributors.base import AttributeOptions, register
from faultfinder.attributors.model import Attribution, Trajectory


@register("counting")
class CountingAttributor:
    name = "counting"

    async def attribute(self, trajectory: Trajectory, options: AttributeOptions) -> Attribution:
        await asyncio.sleep(float(os.environ.get("FAULTFINDER_TEST_SLEEP", "0")))
        path = os.environ["FAULTFINDER_TEST_EXECUTIONS"]
        # One write() of a short line with O_APPEND: lines from processes do not interleave.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{trajectory.run_id} {os.getpid()}\n".encode())
        finally:
            os.close(fd)
        first = trajectory.steps[0]
        return Attribution(method=self.name, agent=first.agent, step=0, reason="counted")
