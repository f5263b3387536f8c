"""The device pass of one GPU whose kernels or memsets lie in temporary files (load/ops_store.SpilledOps): each kind
read a chunk at a time, so that memory holds chunks, not the capture (the 32 GB benchmark export: 111 M kernels,
14.6 M memsets). The same answers as sections/gpu.py's pass in memory (tests/test_spill.py), in these passes:

    kernels:        compute time, the kernels at the copies
    kinds merged:   the busy union in start order, into a temporary file (intervals.CoverageWriter)
    the union:      the gaps
    each kind:      its first operation at or after each gap's end, from which device_ops.next_ops picks the one
                    that ends the gap (a table in memory, the copies, is searched whole)
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from ..common import intervals
from ..common.intervals import Coverage, CoverageWriter, covered_chunks, in_chunks, union_sorted
from ..load.ops_store import OPS, SpilledOps
from .device_ops import next_ops, sorted_times


class Kind:
    """One kind's operations as the pass reads them: their times in start order, clipped to the window, a chunk at a
    time (chunks())."""

    def __init__(self, df, lo: int, hi: int):
        self.df, self.lo, self.hi = df, lo, hi
        self.spilled = isinstance(df, SpilledOps)  # in start order (ops_store.OpsWriter.accepts)
        if not self.spilled:
            self.s, self.e, self.order = sorted_times(df["start_ns"].to_numpy(), df["end_ns"].to_numpy(), lo, hi)

    def _clipped(self, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if s.size and (s[0] < self.lo or s[-1] > self.hi or e.max() > self.hi or e.min() < self.lo):
            return np.clip(s, self.lo, self.hi), np.clip(e, self.lo, self.hi)
        return s, e

    def chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(starts, ends) in start order, clipped to the window, a chunk at a time."""
        if not self.spilled:
            yield from in_chunks(self.s, self.e)
            return
        for c in self.df.chunks(("start_ns", "end_ns")):
            yield self._clipped(c["start_ns"], c["end_ns"])

    def first_at_or_after(self, times: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
        """For each of these sorted times that an operation starts at or after, the first such operation (its
        OPS row; its start clipped): what device_ops.next_ops compares across the kinds, read from the files
        a chunk at a time (no more rows than times: a long capture's gaps, not its operations)."""
        parts, done = [], 0
        for c in self.df.chunks():
            s, _ = self._clipped(c["start_ns"], c["end_ns"])
            upto = done + int(np.searchsorted(times[done:], s[-1], side="right")) if s.size else done
            at = np.searchsorted(s, times[done:upto], side="left")  # every start of the chunks before is earlier
            parts.append(pd.DataFrame({k: v[at] for k, v in c.items()}).assign(clipped=s[at]))
            done = upto
        rows = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=[*OPS, "clipped"])
        return rows[[k for k in OPS if k in rows]], rows["clipped"].to_numpy(np.int64)


def one_device(parts: dict, window: tuple[int, int], min_gap_ns: int):
    """gpu._one_device() of one device's operations (kind -> frame or SpilledOps, in gpu.KINDS order): its
    utilisation row, gaps, busy SpilledCoverage, kernel time at its copies (None without copies or memsets) and
    False (nothing written over)."""
    lo, hi = window
    kinds = {kind: Kind(df, lo, hi) for kind, df in parts.items()}
    at, compute = None, 0
    if "kernel" in kinds:
        copies = kinds.get("memcpy")
        near = _Near(copies.s, copies.e) if copies is not None and set(kinds) != {"kernel"} else None
        compute = covered_chunks(_tapped(kinds["kernel"].chunks(), near))
        at = near.coverage() if near is not None else None
    if set(kinds) != {"kernel"} and at is None:
        at = Coverage(np.zeros(0, np.int64), np.zeros(0, np.int64))
    writer = CoverageWriter()
    for gs, ge in intervals.union_groups(_merged([k.chunks() for k in kinds.values()])):
        writer.append(gs, ge)
    busy = writer.done()
    row = {"busy_ns": writer.total, "compute_ns": compute, "window_ns": hi - lo,
           "utilization": writer.total / (hi - lo) if hi > lo else 0.0,
           "compute_utilization": compute / (hi - lo) if hi > lo else 0.0}
    g = intervals.gaps_of_chunks(busy.chunks(), lo, hi, min_gap_ns)
    if len(g):
        for col, values in next_ops(g["end_ns"].to_numpy(), *_candidates(kinds, g["end_ns"].to_numpy())).items():
            g[f"next_{col}"] = values
    return row, g, busy, at, False


def _candidates(kinds: dict[str, Kind], ends: np.ndarray) -> tuple[dict, dict]:
    """device_ops.next_ops' tables and times: a table in memory whole, one in files as the first operation at or
    after each gap's end (the only one of its kind that can end the gap)."""
    rows, timed = {}, {}
    for kind, k in kinds.items():
        if not k.spilled:
            rows[kind], timed[kind] = k.df, (k.s, k.e, k.order)
            continue
        first_rows, first = k.first_at_or_after(ends)
        if len(first_rows):  # none: no operation of this kind starts after a gap
            rows[kind], timed[kind] = first_rows, (first, first, None)
    return rows, timed


class _Near:
    """The kernels that overlap the copies' union, gathered a chunk at a time (gpu._kernels_at_copies)."""

    def __init__(self, cs: np.ndarray, ce: np.ndarray):
        self.copies = Coverage(*union_sorted(cs, ce)) if cs.size else None
        self.s: list[np.ndarray] = []
        self.e: list[np.ndarray] = []

    def add(self, s: np.ndarray, e: np.ndarray) -> None:
        if self.copies is not None:
            touch = self.copies.touches(s, e)
            self.s.append(s[touch])
            self.e.append(e[touch])

    def coverage(self) -> Coverage:
        if not self.s:
            return Coverage(np.zeros(0, np.int64), np.zeros(0, np.int64))
        return Coverage(*union_sorted(np.concatenate(self.s), np.concatenate(self.e)))


def _tapped(chunks: Iterator, near: _Near | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The chunks, each shown to `near` on the way."""
    for s, e in chunks:
        if near is not None:
            near.add(s, e)
        yield s, e


def _merged(streams: list[Iterator]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Streams of intervals, each in start order a chunk at a time, as one stream in start order: each step hands
    over every held interval up to the earliest last start of a stream not yet done (no later chunk starts before
    its own last start), sorted."""
    if len(streams) == 1:
        yield from streams[0]
        return
    held: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(streams)
    done = [False] * len(streams)
    while True:
        for i, stream in enumerate(streams):
            while (held[i] is None or not held[i][0].size) and not done[i]:
                held[i] = next(stream, None)
                done[i] = held[i] is None
        live = [i for i, h in enumerate(held) if h is not None and h[0].size]
        if not live:
            return
        bounds = [int(held[i][0][-1]) for i in live if not done[i]]
        cut = min(bounds) if bounds else None
        s_parts, e_parts = [], []
        for i in live:
            s, e = held[i]
            k = s.size if cut is None else int(np.searchsorted(s, cut, side="right"))
            s_parts.append(s[:k])
            e_parts.append(e[:k])
            held[i] = (s[k:], e[k:])
        s, e = np.concatenate(s_parts), np.concatenate(e_parts)
        order = np.argsort(s, kind="stable")
        yield s[order], e[order]
