"""What a fix changes in the replayed timeline: an Edit, one field per kind of change, so that the fixes of several
findings combine into one (Edit.combine) and the replay (engine.py) applies them all at once.

    host_removed   ns of each gap that leave the launching thread: its own work (moved to workers, to the GPU, or
                   gone), its waits, mapping or sleep (gone)
    host_added     ns each gap gains (a hand-off the fix adds: a copy into shared memory)
    dropped        calls that are gone, with their GPU operations (a per-element read, a weight copy)
    no_wait        blocking calls that no longer wait for the GPU (a copy made asynchronous, a timing sync removed)
    free_calls     calls that cost the host nothing but still issue their GPU work (launches replayed as a graph)
    call_ns        new own times of calls (NaN: unchanged): a pageable copy's call stages the data at the DMA's pace
    op_ns          new durations of GPU operations (a pageable copy made pinned)
    side_stream    operations moved to a stream of their own (a copy overlapped with compute; it still follows
                   the operation before it on its old stream: its producer)
    pace_ns        the pace of the work moved to other threads or processes, over the replayed span: the loop can go
                   no faster than they do
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Edit:
    """One fix's changes to a Timeline (arrays of its gaps, calls or operations; None: no change of that kind)."""
    host_removed: np.ndarray | None = None
    host_added: np.ndarray | None = None
    dropped: np.ndarray | None = None
    no_wait: np.ndarray | None = None
    free_calls: np.ndarray | None = None
    call_ns: np.ndarray | None = None
    op_ns: np.ndarray | None = None
    side_stream: np.ndarray | None = None
    pace_ns: float = 0.0

    def combine(self, other: "Edit") -> "Edit":
        """Both fixes made: host time removed by either (never more than the gap: the replay caps it),
        added by both, calls dropped or made not to wait by either, the shorter of two operation times, and the moved
        work's paces added (one pool of workers does both)."""
        return Edit(host_removed=_either(self.host_removed, other.host_removed, np.maximum),
                    host_added=_either(self.host_added, other.host_added, np.add),
                    dropped=_either(self.dropped, other.dropped, np.logical_or),
                    no_wait=_either(self.no_wait, other.no_wait, np.logical_or),
                    free_calls=_either(self.free_calls, other.free_calls, np.logical_or),
                    call_ns=_either(self.call_ns, other.call_ns, np.fmin),
                    op_ns=_either(self.op_ns, other.op_ns, np.minimum),
                    side_stream=_either(self.side_stream, other.side_stream, np.logical_or),
                    pace_ns=self.pace_ns + other.pace_ns)

    def with_pace(self, pace_ns: float) -> "Edit":
        """The same changes with another pace."""
        return replace(self, pace_ns=pace_ns)


def _either(a, b, both):
    if a is None:
        return b
    if b is None:
        return a
    return both(a, b)


NONE = Edit()
