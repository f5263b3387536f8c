"""What the device passes share (sections/gpu.py in memory, sections/streamed_pass.py from files): each kind's
times in start order, and the operation that ends each idle gap."""
from __future__ import annotations

import numpy as np


def next_ops(times: np.ndarray, parts: dict, timed: dict) -> dict[str, np.ndarray]:
    """correlation_id and pid of the first operation that starts at or after each time (-1: none), among the tables
    of each kind (parts) and their times in start order (timed: sorted_times()). On equal starts the kinds' order
    decides (a kernel, then a copy, then a memset), then each table's own order."""
    out = {c: np.full(times.size, -1, np.int64) for c in ("correlation_id", "pid")}
    found = np.zeros(times.size, dtype=bool)
    best = np.zeros(times.size, dtype=np.int64)
    for kind, df in parts.items():  # in the kinds' order: a later kind wins only with an earlier start
        s, _, order = timed[kind]
        i = np.searchsorted(s, times, side="left")  # s clipped to the window: compared below as they were
        at = np.clip(i, 0, len(s) - 1)
        rows = at if order is None else order[at]
        start = df["start_ns"].to_numpy()[rows]
        better = (i < len(s)) & (~found | (start < best))
        for col, values in out.items():  # a table without the column: -1, as for no operation
            values[better] = df[col].to_numpy()[rows[better]] if col in df else -1
        best = np.where(better, start, best)
        found |= better
    return out


def sorted_times(starts: np.ndarray, ends: np.ndarray, lo, hi) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Starts and ends in start order, clipped to [lo, hi], and the order applied (None: they were in order, as
    a trace's tables are). The caller's arrays are never changed: a clip that cuts something works on copies."""
    order = None if bool((starts[1:] >= starts[:-1]).all()) else np.argsort(starts, kind="stable")
    s, e = (starts, ends) if order is None else (starts[order], ends[order])
    if s.size and (s[0] < lo or s[-1] > hi or ends.max() > hi or ends.min() < lo):
        s, e = np.clip(s, lo, hi), np.clip(e, lo, hi)
    return s, e, order
