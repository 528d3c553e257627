"""The ingest processes give request-sized buffers back when they are freed."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_a_freed_request_sized_buffer_leaves_the_process() -> None:
    # In a fresh interpreter: free one 45 MiB buffer (which raises glibc's threshold), then
    # allocate and free 40 MiB ones; with the threshold fixed, none of them stays resident.
    script = """
import sys
from faultfinder.server.memory import return_large_buffers
if sys.argv[1] == "fixed":
    assert return_large_buffers()
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS"))
first = bytearray(45 << 20); del first
start = rss()
for _ in range(5):
    held = [bytearray(8 << 20) for _ in range(5)]
    del held
print(rss() - start)
"""
    grown = {
        mode: int(
            subprocess.run(
                [sys.executable, "-c", script, mode], capture_output=True, text=True, check=True
            ).stdout
        )
        for mode in ("default", "fixed")
    }
    assert grown["fixed"] < 4 << 10  # KiB: nothing request-sized stays
    assert grown["default"] > grown["fixed"]
