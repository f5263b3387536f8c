"""The idle time a synchronising CUDA call leaves (sections/idle.py): after the call returns the GPU stays idle until
the host issues more work; the first SYNC_TURNAROUND_NS of it is the sync's own cost, the rest the work the thread
did next, which the sync serialises."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..common.interval_sets import Union


SYNC_TURNAROUND_NS = 100_000  # a sync's own cost to the GPU: the host returns from it and issues the next work


def sync_arrays(syncs: pd.DataFrame) -> dict:
    """The threads' synchronising calls' ends, sorted, and their starts in the same order (idle.py's _Shared
    sync_ends and sync_starts)."""
    order = np.argsort(syncs["end_ns"].to_numpy(), kind="stable")
    return {"sync_ends": syncs["end_ns"].to_numpy()[order], "sync_starts": syncs["start_ns"].to_numpy()[order]}


def sync_turnaround(after: Union, ends: np.ndarray, starts: np.ndarray) -> Union:
    """Of the idle time after each sync returned (idle_after_sync), the first SYNC_TURNAROUND_NS: the sync's cost. Past
    it the GPU waits for what the thread does next (its ranges, OS calls, CPU work), which the sync only serialises."""
    if after[0].size == 0:
        return after
    i = np.searchsorted(ends, after[0], side="left")  # the sync that returned inside each piece (idle_after_sync's)
    sync_start = starts[np.clip(i, 0, ends.size - 1)]
    # from the sync's call: the idle time before it was the thread's own work up to the call (the GPU had drained)
    s = np.maximum(sync_start, after[0])
    e = np.minimum(after[1], s + SYNC_TURNAROUND_NS)
    keep = e > s
    return s[keep], e[keep]


def idle_after_sync(idle: Union, ends: np.ndarray, range_starts: np.ndarray) -> Union:
    """The idle time after a synchronising call returned (ends: the calls' ends, sorted): the GPU drained while the
    host waited, then stayed idle until the host issued more work, or until the thread entered or left an NVTX range
    (other work, other causes)."""
    if ends.size == 0 or idle[0].size == 0:
        return idle[0][:0], idle[1][:0]
    i = np.searchsorted(ends, idle[0], side="left")
    hit = (i < ends.size) & (ends[np.clip(i, 0, ends.size - 1)] <= idle[1])
    s, e, sync_end = idle[0][hit], idle[1][hit], ends[np.clip(i, 0, ends.size - 1)][hit]
    if range_starts.size:
        j = np.searchsorted(range_starts, sync_end, side="left")
        nxt = np.where(j < range_starts.size, range_starts[np.clip(j, 0, range_starts.size - 1)], e)
        e = np.minimum(e, np.maximum(nxt, sync_end))
    keep = e > s
    return s[keep], e[keep]
