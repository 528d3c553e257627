"""Giving request-sized buffers back to the system as soon as they are freed.

glibc serves allocations of 128 KiB and more with their own memory maps, but after the
first such block is freed it raises that threshold to the block's size (up to 32 MiB) and
serves later ones from its heaps, which keep what was freed. An ingest process handles
bodies of up to `FAULTFINDER_MAX_REQUEST_BYTES` (and gRPC core copies each message): with
the threshold raised, 100 refused 45 MiB gRPC calls left the process 282 MB larger, with it
fixed at 1 MiB 119 MB (reports/hostile.md). Fixing the threshold keeps every large buffer
in a map of its own, unmapped when freed; the cost is one system call per large buffer.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["LARGE_BUFFER_BYTES", "return_large_buffers"]

log = logging.getLogger(__name__)

LARGE_BUFFER_BYTES = 1 << 20
"""Allocations of this size and more get a memory map of their own."""
_M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameter number for the threshold (malloc.h)."""


def return_large_buffers() -> bool:
    """Fix glibc's map threshold at `LARGE_BUFFER_BYTES` for this process; whether it
    took (False on a C library without `mallopt`, e.g. musl, where nothing is done)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    took = bool(mallopt(_M_MMAP_THRESHOLD, LARGE_BUFFER_BYTES))
    if not took:
        log.debug("mallopt(M_MMAP_THRESHOLD) was refused; large buffers stay in the heaps")
    return took
