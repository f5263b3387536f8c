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
from typing import NamedTuple

import numpy as np

from .edits import NONE, Edit
from ..sections.timeline import Timeline

try:
    from . import _engine  # type: ignore[attr-defined]  # compiled: mypy cannot read it
except ImportError:  # built by `pip install .` where a C compiler is present; the same steps run in Python otherwise
    _engine = None

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
           cpu_share: float = 1.0, compiled: bool = True) -> Replayed:
    """The span replayed with the edit (module doc); compiled: through _engine.c where it is built (the same steps,
    _Run's, in C), else in Python."""
    p = _prepare(t, edit, profiler_ns, drop_ns, cpu_share)
    if compiled and _engine is not None:
        ends = np.empty(t.op_start.size)
        h, host = _engine.run(p.gaps, p.call_own, p.waits, p.dropped, p.awaits, p.tail, p.ptr, p.order, p.lat,
                              p.after, p.op_ns, p.stream, p.producer, p.op_start, p.external, ends,
                              t.call_start.size, t.op_start.size, p.external.size, p.order.size, p.streams,
                              float(t.lo), float(t.queued_ns), float(profiler_ns), p.drop_ns)
    else:
        ends, h, host = _Run(p, float(t.lo), float(t.queued_ns), float(profiler_ns)).run()
    ran = ends == ends
    gpu_end = float(ends[ran].max()) if ran.any() else h
    duration = max(h, gpu_end) - t.lo
    copies = ran & (t.op_kind == "copy")
    return Replayed(max(duration, edit.pace_ns), _busy(ends[ran], p.op_ns[ran]), host, edit.pace_ns,
                    _busy(ends[copies], p.op_ns[copies]))


class _Prepared(NamedTuple):
    """A replay's inputs, the edit applied: per call, per operation, the operations of each call (order[ptr[c]:
    ptr[c + 1]]), the streams numbered 0..streams-1 (a moved operation's producer: its old stream's number)."""
    gaps: np.ndarray
    call_own: np.ndarray
    waits: np.ndarray
    dropped: np.ndarray
    awaits: np.ndarray
    tail: np.ndarray
    ptr: np.ndarray
    order: np.ndarray
    lat: np.ndarray
    after: np.ndarray
    op_ns: np.ndarray
    stream: np.ndarray
    producer: np.ndarray
    op_start: np.ndarray
    external: np.ndarray
    streams: int
    drop_ns: float


def _prepare(t: Timeline, edit: Edit, profiler_ns: float, drop_ns: float, cpu_share: float) -> _Prepared:
    n = t.call_start.size
    none = np.zeros(n, bool)
    own = (t.call_end - t.call_start).astype(float)
    waits = (t.call_awaits >= 0) & ~(edit.no_wait if edit.no_wait is not None else none)
    call_own = np.where(t.call_awaits >= 0, np.minimum(own - t.call_tail, OWN_WAIT_NS) +
                        np.where(waits, 0, t.call_tail), own)
    if edit.call_ns is not None:
        call_own = np.where(np.isnan(edit.call_ns), call_own, edit.call_ns)
    if edit.free_calls is not None:
        call_own = np.where(edit.free_calls, 0.0, call_own)
    stream, producer, streams = _streams(t, edit)
    mine = t.op_call >= 0
    order = np.flatnonzero(mine)[np.argsort(t.op_call[mine], kind="stable")].astype(np.int64)
    ptr = np.searchsorted(t.op_call[order], np.arange(n + 1), side="left").astype(np.int64)
    external = np.flatnonzero(~mine)
    external = external[np.argsort(t.op_start[external], kind="stable")].astype(np.int64)
    f8 = lambda a: np.ascontiguousarray(a, dtype=np.float64)  # noqa: E731
    i8 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    u1 = lambda a: np.ascontiguousarray(a, dtype=np.uint8)  # noqa: E731
    return _Prepared(
        gaps=f8(_gaps(t, edit, cpu_share)), call_own=f8(call_own), waits=u1(waits),
        dropped=u1(edit.dropped if edit.dropped is not None else none), awaits=i8(t.call_awaits),
        tail=f8(t.call_tail), ptr=ptr, order=order,
        lat=f8(np.maximum(t.op_latency - 2 * profiler_ns, 0.3 * t.op_latency)), after=i8(t.op_after),
        op_ns=f8(edit.op_ns if edit.op_ns is not None else t.op_end - t.op_start), stream=i8(stream),
        producer=i8(producer), op_start=f8(t.op_start), external=external, streams=streams,
        drop_ns=max(drop_ns - profiler_ns, 0.0))


class _Run:
    """The replay's loop in Python (where _engine.c is not built): the host's clock, the streams' ends, each
    operation's end, the profiler's cost still to take off the host (credit), and the host's own work so far."""

    def __init__(self, p: _Prepared, lo: float, queued_ns: float, profiler_ns: float):
        self.p, self.queued, self.profiler_ns = p, queued_ns, profiler_ns
        self.gaps, self.call_own, self.waits = p.gaps.tolist(), p.call_own.tolist(), p.waits.tolist()
        self.dropped, self.awaits, self.tail = p.dropped.tolist(), p.awaits.tolist(), p.tail.tolist()
        self.lat, self.after, self.op_ns = p.lat.tolist(), p.after.tolist(), p.op_ns.tolist()
        self.stream, self.producer, self.op_start = p.stream.tolist(), p.producer.tolist(), p.op_start.tolist()
        self.external, self.ptr, self.order = p.external.tolist(), p.ptr.tolist(), p.order.tolist()
        self.ends = [float("nan")] * len(self.op_ns)
        self.stream_end: dict[int, float] = {}
        self.h, self.credit, self.host, self.ext_i = lo, 0.0, 0.0, 0

    def run(self) -> tuple[np.ndarray, float, float]:
        """(each operation's end, NaN where it did not run; the host's clock at the end; its own time)."""
        for c in range(len(self.call_own)):
            self.call(c)
        self.h += self._host(self.gaps[-1])
        return np.array(self.ends, dtype=float), self.h, self.host

    def _host(self, x: float) -> float:
        """x of the host's time, less what it gives of the profiler's cost (at most 90%: a gap keeps some of its own)."""
        cut = min(self.credit, 0.9 * x) if x > 0 else 0.0
        self.credit -= cut
        self.host += x - cut
        return x - cut

    def call(self, c: int) -> None:
        """The gap before call c, then the call: its operations launched, its wait for the GPU where it waits."""
        self.credit += self.profiler_ns + (self.p.drop_ns if self.dropped[c] else 0.0)
        self.h += self._host(self.gaps[c])
        if self.dropped[c]:
            return
        self._external_until(self.h)
        for q in range(self.ptr[c], self.ptr[c + 1]):
            self._launch(self.order[q])
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
        begin = max(self.h + self.lat[j], self.stream_end.get(self.stream[j], -1e30) + self.queued)
        if self.producer[j] >= 0:
            begin = max(begin, self.stream_end.get(self.producer[j], -1e30))
        k = self.after[j]
        if k >= 0 and self.ends[k] == self.ends[k]:  # not NaN: the operation it waited for ran in the replay
            begin = max(begin, self.ends[k])
        self.ends[j] = begin + self.op_ns[j]
        self.stream_end[self.stream[j]] = self.ends[j]


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


def _streams(t: Timeline, edit: Edit) -> tuple[np.ndarray, np.ndarray, int]:
    """Each operation's stream, numbered 0..S-1: its own, or a side stream of its own old stream's (one per old
    stream, numbered after the old ones: the copies of one compute stream); for a moved one its old stream's number
    (it still waits for its producer there), -1 for the others; and S."""
    old, own = np.unique(t.op_stream, return_inverse=True)
    own = own.astype(np.int64).ravel()
    moved = edit.side_stream if edit.side_stream is not None else np.zeros(own.size, bool)
    return np.where(moved, own + old.size, own), np.where(moved, own, -1), 2 * old.size


def _busy(ends: np.ndarray, op_ns: np.ndarray) -> float:
    """The GPU's busy time in the replay: the union of its operations' [end - duration, end)."""
    if ends.size == 0:
        return 0.0
    starts = ends - op_ns
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    begins = np.maximum(s, np.r_[-np.inf, reach[:-1]])
    return float(np.maximum(e - begins, 0.0)[e > np.r_[-np.inf, reach[:-1]]].sum())
