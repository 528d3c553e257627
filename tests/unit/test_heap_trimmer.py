"""Free heap goes back to the system: `heap_trim` really returns it, and the server's
`HeapTrimmer` trims once the resident size has grown, not every second."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util

import pytest

from faultfinder.server.heap_trimmer import HeapTrimmer
from faultfinder.server.memory import heap_trim, resident_bytes

MIB = 1 << 20


def _libc() -> ctypes.CDLL:
    name = ctypes.util.find_library("c")
    assert name is not None
    return ctypes.CDLL(name)


def test_a_trim_gives_back_heap_that_was_freed_below_a_block_in_use() -> None:
    trim = heap_trim()
    if trim is None:
        pytest.skip("this C library has no malloc_trim")
    libc = _libc()
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)
    block = 64 * 1024  # below glibc's map threshold: served from the heap
    blocks = [libc.malloc(block) for _ in range(2048)]  # 128 MiB
    for address in blocks:
        ctypes.memset(address, 1, block)
    for address in blocks[:-1]:
        libc.free(address)  # the last stays in use: the heap cannot shrink from its top
    before = resident_bytes()
    trim()
    after = resident_bytes()
    libc.free(blocks[-1])
    assert before is not None and after is not None
    assert before - after > 64 * MIB, (before >> 20, after >> 20)


class _Process:
    def __init__(self, resident: int) -> None:
        self.resident = resident
        self.trims = 0
        self.freed_by_trim = 0

    def trim(self) -> None:
        self.trims += 1
        self.resident -= self.freed_by_trim


def _trimmer(process: _Process, growth: int = 32 * MIB) -> HeapTrimmer:
    return HeapTrimmer(growth=growth, trim=process.trim, resident=lambda: process.resident)


def test_growth_below_the_step_is_left_alone_and_growth_past_it_is_trimmed() -> None:
    process = _Process(200 * MIB)
    trimmer = _trimmer(process)
    process.resident += 31 * MIB
    asyncio.run(trimmer.tick())
    assert process.trims == 0
    process.resident += 2 * MIB
    process.freed_by_trim = 30 * MIB
    asyncio.run(trimmer.tick())
    assert process.trims == 1 and process.resident == 203 * MIB


def test_memory_in_use_costs_one_trim_not_one_a_tick() -> None:
    process = _Process(200 * MIB)
    trimmer = _trimmer(process)
    process.resident += 100 * MIB  # held, not free: a trim gives nothing back
    for _ in range(5):
        asyncio.run(trimmer.tick())
    assert process.trims == 1


def test_a_shrinking_process_lowers_the_mark_growth_is_measured_from() -> None:
    process = _Process(200 * MIB)
    trimmer = _trimmer(process)
    process.resident = 120 * MIB
    asyncio.run(trimmer.tick())
    process.resident = 160 * MIB  # 40 MB over the new low, 40 below the start
    asyncio.run(trimmer.tick())
    assert process.trims == 1


def test_without_malloc_trim_nothing_is_done() -> None:
    trimmer = HeapTrimmer(resident=lambda: 10**12)
    trimmer._trim = None
    asyncio.run(trimmer.tick())
    assert trimmer.trims == 0
