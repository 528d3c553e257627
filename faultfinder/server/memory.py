"""Giving request-sized buffers back to the system as soon as they are freed.

glibc serves allocations of 128 KiB and more with their own memory maps, but after the
first such block is freed it raises that threshold to the block's size (up to 32 MiB) and
serves later ones from its heaps, which keep what was freed. An ingest process handles
bodies of up to `FAULTFINDER_MAX_REQUEST_BYTES` (and gRPC core copies each message): with
the threshold raised, 100 refused 45 MiB gRPC calls left the process 282 MB larger, with it
fixed at 1 MiB 119 MB (reports/hostile.md). Fixing the threshold keeps every large buffer
in a map of its own, unmapped when freed; the cost is one system call per large buffer.

That is not all the heap keeps. gRPC core reads each message in small slices on threads
of its own, each thread with its own heap (arena), and a freed slice stays in its heap:
100 refused 45 MiB calls still left the process 186 MB larger, every byte of it free
(`malloc_trim(0)` then gave back 193 MB): `heap_trim`, called by the server's
`HeapTrimmer` (`heap_trimmer.py`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
from collections.abc import Callable

__all__ = ["LARGE_BUFFER_BYTES", "heap_trim", "resident_bytes", "return_large_buffers"]

log = logging.getLogger(__name__)

LARGE_BUFFER_BYTES = 1 << 20
"""Allocations of this size and more get a memory map of their own."""
_M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameter number for the threshold (malloc.h)."""
_PAGE_BYTES = mmap.PAGESIZE


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def return_large_buffers() -> bool:
    """Fix glibc's map threshold at `LARGE_BUFFER_BYTES` for this process; whether it
    took (False on a C library without `mallopt`, e.g. musl, where nothing is done)."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    took = bool(mallopt(_M_MMAP_THRESHOLD, LARGE_BUFFER_BYTES))
    if not took:
        log.debug("mallopt(M_MMAP_THRESHOLD) was refused; large buffers stay in the heaps")
    return took


def resident_bytes() -> int | None:
    """This process's resident size (`/proc/self/statm`); None where there is none."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


def heap_trim() -> Callable[[], object] | None:
    """glibc's `malloc_trim(0)` (free heap back to the system, every arena); None on a C
    library without it."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return lambda: trim(0)
