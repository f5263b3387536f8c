"""Freed memory goes back to the system (glibc), so that peak RSS follows what the analysis holds.

The analysis frees arrays of a few to tens of MB on several threads. By default glibc serves such sizes from its
heaps once one of them was freed (it raises its mapping threshold up to 32 MB) and keeps one heap per thread: freed
memory stayed resident, about 1.5 GiB more than was live on an 8 GB export (docs/benchmarks.md). Giving it back
costs page faults: 10-30% more time on 0.5 and 2 GB exports, whose peak stays well within 2 GB without it. So it is
asked for from LARGE_TRACE_BYTES on (and stays set for the rest of the process: glibc cannot go back).

pandas keeps text in Arrow arrays, whose default pool (mimalloc) keeps what is freed for reuse: 0.15-0.2 GiB more than
was live on the 8 GB export, growing with the trace (benchmarks/memory_timeline.py: RSS outside malloc's blocks). From
the same size on, Arrow allocates through malloc instead, set up as above.
"""
from __future__ import annotations

import ctypes
import sys

M_MMAP_THRESHOLD = -3  # malloc.h: blocks from this size get their own mapping, unmapped when freed
M_ARENA_MAX = -8       # malloc.h: at most this many heaps, shared by the threads
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's initial value; setting it keeps glibc from raising it
LARGE_TRACE_BYTES = 1 << 31  # exports from this size: peak memory before speed


def return_freed_memory() -> bool:
    """Map large blocks apart and keep one heap (glibc's mallopt); False where the C library has no mallopt."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mapped = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    one_heap = mallopt(M_ARENA_MAX, 1)
    _arrow_through_malloc()
    return bool(mapped and one_heap)


def _arrow_through_malloc() -> None:
    """Arrow's allocations (pandas' text columns) through malloc, where pyarrow is installed."""
    try:
        import pyarrow  # noqa: PLC0415 - optional: pandas stores text in it when present
    except ImportError:
        return
    pyarrow.set_memory_pool(pyarrow.system_memory_pool())
