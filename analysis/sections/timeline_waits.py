"""What each GPU operation and each blocking call of a replayed timeline (timeline.py) waited for, read from the
capture itself, so that no stream or event bookkeeping is guessed:
- an operation starts at the latest of its launch plus its launch latency, the end of the operation before it on its
  stream, and (where it started later than both) the end of an operation on another stream that ended just before it
  started (an event wait, a copy that waits for its producer);
- a blocking call (a synchronize, a copy into pageable memory, a free) waited for the operation that ended last while
  it was in the call; it returns `tail` after that operation's end."""
from __future__ import annotations

import numpy as np

QUEUED_NS = 4_000        # an operation that starts this soon after the one before it on its stream was queued
LATE_NS = 5_000          # one that starts this much later than its launch and its stream allow waited for another
LATENCY_MAX_NS = 1_000_000  # a launch takes at most this long to reach an idle stream: a later start waited for more


def infer_waits(t: dict) -> dict:
    """What each operation and each blocking call waited for, from the capture's own times (the module doc)."""
    starts, ends, stream, call = t["op_start"], t["op_end"], t["op_stream"], t["op_call"]
    cs, ce = t["call_start"], t["call_end"]
    m = starts.size
    prev_end = np.full(m, np.iinfo(np.int64).min // 2, np.int64)
    order = np.lexsort((starts, stream))
    same = np.r_[False, stream[order][1:] == stream[order][:-1]]
    prev_end[order[same]] = ends[order][np.flatnonzero(same) - 1]
    own = call >= 0
    launched = np.where(own, cs[np.clip(call, 0, None)], starts)
    after_prev = starts - prev_end
    queued = after_prev[(after_prev >= 0) & (after_prev <= QUEUED_NS)]
    queued_ns = float(np.median(queued)) if queued.size else 1_000.0
    observed = (starts - launched).astype(float)
    free = own & (after_prev > QUEUED_NS)  # its stream was idle when it started
    plain = free & (observed <= LATENCY_MAX_NS)
    typical = float(np.median(observed[plain])) if plain.any() else 5_000.0
    after = _waited_for_other_stream(starts, ends, stream, free & ~plain, launched + typical)
    # a free operation that started late waited for another stream's (after), else for something the trace does
    # not show (module loading at a kernel's first launch): its own delay is kept, so that the replay runs as it ran
    latency = np.where(plain | (free & (after < 0)), np.maximum(observed, 0.0), typical)
    awaits, tail = _blocking_waits(t["blocking"], cs, ce, starts, ends)
    return {"op_latency": latency, "op_after": after, "call_awaits": awaits, "call_tail": tail, "queued_ns": queued_ns}


def _waited_for_other_stream(starts, ends, stream, late_ones, allowed) -> np.ndarray:
    """For each of the late operations that started LATE_NS after its launch allowed: the operation on another
    stream that ended last at most LATE_NS before it started (-1: none)."""
    after = np.full(starts.size, -1, np.int64)
    late = np.flatnonzero(late_ones & (starts - allowed > LATE_NS))
    if late.size == 0:
        return after
    by_end = np.argsort(ends, kind="stable")
    sorted_end = ends[by_end]
    for i in late:
        j = int(np.searchsorted(sorted_end, starts[i], side="right")) - 1
        while j >= 0 and sorted_end[j] >= starts[i] - LATE_NS:
            k = by_end[j]
            if stream[k] != stream[i]:
                after[i] = k
                break
            j -= 1
    return after


def _blocking_waits(blocking, cs, ce, starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """For each blocking call, the operation it waited for (the one that ended last inside the call, started before
    the call returned; -1: it waited for none) and the time from that operation's end to the call's return."""
    awaits = np.full(cs.size, -1, np.int64)
    tail = np.zeros(cs.size, np.int64)
    if not blocking.any() or starts.size == 0:
        return awaits, tail
    by_end = np.argsort(ends, kind="stable")
    sorted_end = ends[by_end]
    for c in np.flatnonzero(blocking):
        j = int(np.searchsorted(sorted_end, ce[c], side="right")) - 1
        while j >= 0 and sorted_end[j] > cs[c]:
            k = by_end[j]
            if starts[k] < ce[c]:
                awaits[c], tail[c] = k, ce[c] - ends[k]
                break
            j -= 1
    return awaits, tail
