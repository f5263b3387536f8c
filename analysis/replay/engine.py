"""The replay: the launching thread's calls and its GPU operations run again, in order, with a fix's Edit applied,
keeping what each waited for in the capture (sections/timeline.py):

    host clock h:  h += the gap before the call (its own work less what the fix removed, plus what it added)
    a launch:      its operations start at max(h + launch latency, the end of the one before on their stream,
                   the end of the operation on another stream they waited for); h += the call's own time
    a blocking call (that waited in the capture): h = max(h + its own time, the end of what it waited for) + tail
    the end:       h after the last gap, or the GPU's last end if later; the moved work's pace as a floor

Replayed without an Edit, the span takes what it took in the capture (tests/test_replay.py holds it to 0.1%).

profiler_ns: nsys's own cost of each traced call, which the program's clock does not pay: taken off the host's
time (the gaps first, then the calls' own time, never the GPU's), so that the replay runs at the program's unprofiled
pace. drop_ns: the host work a CUDA call carries in the capture beyond its own timestamps (the dispatch to CUDA and the
profiler's hooks, profiler_ns of it): a dropped call takes it away with it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsys_transfer.analysis.replay.edits import NONE, Edit
from nsys_transfer.analysis.sections.timeline import Timeline

OWN_WAIT_NS = 1_000  # a blocking call's own time before it waits (the rest of its time in the capture was the wait)


BOUND_SHARE = 0.8  # a resource busy this share of the span sets its length; below it, host and GPU take turns


@dataclass(frozen=True)
class Replayed:
    """One replay: the span's length (ns), the GPU's busy time in it (of it its copies'), the launching thread's own
    work (CPU work and calls, not waits for the GPU), the moved work's pace (ns over the span; 0 without)."""
    duration_ns: float
    gpu_ns: float
    host_ns: float
    pace_ns: float
    copy_ns: float = 0.0

    @property
    def limit(self) -> str:
        """What sets the span's length: 'pace', 'gpu', 'copies' (the GPU, busy mostly copying), 'host', or 'turns'
        (no one resource busy BOUND_SHARE of it: the host and the GPU wait for each other)."""
        name, ns = max((("pace", self.pace_ns), ("gpu", self.gpu_ns), ("host", self.host_ns)), key=lambda kv: kv[1])
        if ns < BOUND_SHARE * self.duration_ns:
            return "turns"
        return "copies" if name == "gpu" and self.copy_ns >= 0.5 * self.gpu_ns else name


def replay(t: Timeline, edit: Edit = NONE, profiler_ns: float = 0.0, drop_ns: float = 0.0,
           cpu_share: float = 1.0) -> Replayed:
    """The span replayed with the edit (module doc)."""
    run = _Run(t, edit, profiler_ns, drop_ns, cpu_share)
    for c in range(t.call_start.size):
        run.call(c)
    return run.done()


class _Run:
    """One replay's state: the host's clock, the streams' ends, each operation's end, the profiler's cost still to
    take off the host (credit), and the host's own work so far."""

    def __init__(self, t: Timeline, edit: Edit, profiler_ns: float, drop_ns: float, cpu_share: float):
        n = t.call_start.size
        none = np.zeros(n, bool)
        own = (t.call_end - t.call_start).astype(float)
        waits = (t.call_awaits >= 0) & ~(edit.no_wait if edit.no_wait is not None else none)
        call_own = np.where(t.call_awaits >= 0, np.minimum(own - t.call_tail, OWN_WAIT_NS) +
                            np.where(waits, 0, t.call_tail), own)
        if edit.free_calls is not None:
            call_own = np.where(edit.free_calls, 0.0, call_own)
        self.t, self.edit = t, edit
        self.profiler_ns, self.drop_ns = profiler_ns, max(drop_ns - profiler_ns, 0.0)
        self.gaps, self.call_own, self.waits = _gaps(t, edit, cpu_share).tolist(), call_own.tolist(), waits.tolist()
        self.dropped = (edit.dropped if edit.dropped is not None else none).tolist()
        self.op_ns = (edit.op_ns if edit.op_ns is not None else (t.op_end - t.op_start).astype(float)).tolist()
        self.stream, self.producer = _streams(t, edit)
        self.ops_of = _ops_by_call(t.op_call, n)
        self.lat = np.maximum(t.op_latency - 2 * profiler_ns, 0.3 * t.op_latency).tolist()
        self.after, self.awaits, self.tail = t.op_after.tolist(), t.call_awaits.tolist(), t.call_tail.tolist()
        self.op_start = t.op_start.tolist()
        self.external = [int(i) for i in np.flatnonzero(t.op_call < 0)]
        self.ends = [float("nan")] * t.op_start.size
        self.stream_end: dict[int, float] = {}
        self.h, self.credit, self.host, self.ext_i = float(t.lo), 0.0, 0.0, 0

    def _host(self, x: float) -> float:
        """x of the host's time, less what it gives of the profiler's cost (at most 90%: a gap keeps some of its own)."""
        cut = min(self.credit, 0.9 * x) if x > 0 else 0.0
        self.credit -= cut
        self.host += x - cut
        return x - cut

    def call(self, c: int) -> None:
        """The gap before call c, then the call: its operations launched, its wait for the GPU where it waits."""
        self.credit += self.profiler_ns + (self.drop_ns if self.dropped[c] else 0.0)
        self.h += self._host(self.gaps[c])
        if self.dropped[c]:
            return
        self._external_until(self.h)
        for j in self.ops_of[c]:
            self._launch(j)
        step = self._host(self.call_own[c])
        a = self.awaits[c]
        if self.waits[c] and a >= 0:
            target = self.ends[a] if self.ends[a] == self.ends[a] else self.stream_end.get(self.stream[a], self.h)
            self.h = max(self.h + step, target) + self._host(self.tail[c])
        else:
            self.h += step

    def _external_until(self, h: float) -> None:
        """Other threads' operations on the same GPU, at their captured starts, up to the host's clock."""
        while self.ext_i < len(self.external) and self.op_start[self.external[self.ext_i]] <= h:
            j = self.external[self.ext_i]
            self.ends[j] = max(self.op_start[j], self.stream_end.get(self.stream[j], self.op_start[j])) + self.op_ns[j]
            self.stream_end[self.stream[j]] = self.ends[j]
            self.ext_i += 1

    def _launch(self, j: int) -> None:
        """Operation j, launched now: after its launch latency, the operation before it on its stream (and, moved to a
        side stream, its producer on its old one), and the other stream's operation it waited for in the capture."""
        begin = max(self.h + self.lat[j], self.stream_end.get(self.stream[j], -1e30) + self.t.queued_ns)
        if self.producer[j] is not None:
            begin = max(begin, self.stream_end.get(self.producer[j], -1e30))
        k = self.after[j]
        if k >= 0 and self.ends[k] == self.ends[k]:  # not NaN: the operation it waited for ran in the replay
            begin = max(begin, self.ends[k])
        self.ends[j] = begin + self.op_ns[j]
        self.stream_end[self.stream[j]] = self.ends[j]

    def done(self) -> Replayed:
        """The replay's figures, after the last gap."""
        self.h += self._host(self.gaps[-1])
        gpu_end = max((e for e in self.ends if e == e), default=self.h)
        duration = max(self.h, gpu_end) - self.t.lo
        copies = [i for i, k in enumerate(self.t.op_kind.tolist()) if k == "copy"]
        return Replayed(max(duration, self.edit.pace_ns), _busy(self.ends, self.op_ns), self.host, self.edit.pace_ns,
                        _busy([self.ends[i] for i in copies], [self.op_ns[i] for i in copies]))


def _gaps(t: Timeline, edit: Edit, cpu_share: float = 1.0) -> np.ndarray:
    """Each gap's time with the fix: less what leaves the thread (its own work, its waits, mapping or sleep: the fix
    says which; never below none), the rest of its own work at cpu_share of its captured time (the profiler's slowing
    of it taken out), plus what is added."""
    g = t.gap_ns.astype(float)
    own = t.cpu_ns.astype(float)
    if edit.host_removed is not None:
        removed = np.minimum(edit.host_removed, g)
        g = g - removed
        own = np.maximum(own - removed, 0.0)
    g = g - own * (1.0 - cpu_share)
    if edit.host_added is not None:
        g = g + edit.host_added
    return np.maximum(g, 0.0)


def _streams(t: Timeline, edit: Edit) -> tuple[list[int], list[int | None]]:
    """Each operation's stream: its own, or a side stream of its own old stream's (one per old stream: the copies of
    one compute stream); and, for a moved one, its old stream (it still waits for its producer there)."""
    old = t.op_stream.tolist()
    if edit.side_stream is None or not edit.side_stream.any():
        return old, [None] * len(old)
    moved = edit.side_stream.tolist()
    return ([-(s + 1_000_000) if mv else s for s, mv in zip(old, moved)],
            [s if mv else None for s, mv in zip(old, moved)])


def _ops_by_call(op_call: np.ndarray, n: int) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(n)]
    for j, c in enumerate(op_call.tolist()):
        if c >= 0:
            out[c].append(j)
    return out


def _busy(ends: list[float], op_ns: list[float]) -> float:
    """The GPU's busy time in the replay: the union of its operations."""
    spans = sorted((e - d, e) for e, d in zip(ends, op_ns) if e == e)
    busy, reach = 0.0, -1e30
    for s, e in spans:
        if e <= reach:
            continue
        busy += e - max(s, reach)
        reach = e
    return busy
