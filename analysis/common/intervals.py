"""Interval arithmetic on numpy arrays: union, coverage function, gaps. Vectorised, no Python loops."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import cached_property

import numpy as np
import pandas as pd

from .spill import Column


def union(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping [start, end) intervals (HTA's `start > end.shift().cummax()` grouping)."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")  # timsort: near-linear on traces, which are mostly in time order
    return union_sorted(s[order], e[order])


def union_sorted(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """union() of intervals already sorted by start."""
    if s.size == 0:
        return s, e
    reach = np.maximum.accumulate(e)
    new_group = np.empty(s.size, dtype=bool)
    new_group[0] = True
    np.greater(s[1:], reach[:-1], out=new_group[1:])
    idx = np.flatnonzero(new_group)
    del new_group
    if bool((e < s).any()):  # an interval ending before it starts: the group's largest end, as given
        return s[idx], np.maximum.reduceat(e, idx)
    # else a group's largest end is the latest end so far at its last interval (every earlier one ends before the
    # group starts): a gather, several times cheaper than reduceat on millions
    last = np.empty_like(idx)
    last[:-1] = idx[1:] - 1
    last[-1] = s.size - 1
    return s[idx], reach[last]


CHUNK = 1 << 20  # intervals per step of the chunked forms: a few tens of MB of temporaries, whatever the trace


def union_groups(chunks: Iterable[tuple[np.ndarray, np.ndarray]]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """union_sorted() of intervals handed over chunk by chunk in start order (no end before its start), as the
    merged intervals each chunk completes: the last group of a chunk stays open, joined by the next chunk's first
    intervals where they reach it."""
    open_s = open_e = None
    for s, e in chunks:
        if not s.size:
            continue
        reach = np.maximum.accumulate(e)
        if open_e is not None:
            np.maximum(reach, open_e, out=reach)
        new = np.empty(s.size, dtype=bool)
        new[0] = open_e is None or s[0] > open_e
        np.greater(s[1:], reach[:-1], out=new[1:])
        idx = np.flatnonzero(new)
        del new
        if idx.size == 0:  # the whole chunk extends the open group
            open_e = reach[-1]
            continue
        # closed by this chunk: the open group reaches up to the last interval before the first new group
        closed = None if open_e is None else (np.array([open_s]), np.array([reach[idx[0] - 1] if idx[0] else open_e]))
        groups = s[idx[:-1]], reach[idx[1:] - 1]
        open_s, open_e = s[idx[-1]], reach[-1]  # all read before yielding: union_chunks may write over the chunk
        if closed is not None:
            yield closed
        yield groups
    if open_e is not None:
        yield np.array([open_s]), np.array([open_e])


def union_chunks(chunks: Iterable[tuple[np.ndarray, np.ndarray]], capacity: int,
                 into: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """union_sorted() of intervals handed over chunk by chunk in start order (at most `capacity` of them, no end
    before its start), its temporaries bounded by a chunk's: the result is written into arrays made once, or into
    `into` (int64 arrays of at least `capacity`: the result is then views of them)."""
    out: list[np.ndarray] = list(into) if into is not None else []
    n = 0
    for gs, ge in union_groups(chunks):
        if not out:
            out = [np.empty(capacity, dtype=gs.dtype), np.empty(capacity, dtype=ge.dtype)]
        out[0][n:n + gs.size], out[1][n:n + gs.size] = gs, ge
        n += gs.size
    if not out:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # a union much smaller than its intervals: its own arrays, the large ones freed
    keep = into is not None or 2 * n > capacity
    return (out[0][:n], out[1][:n]) if keep else (out[0][:n].copy(), out[1][:n].copy())


def covered_chunks(chunks: Iterable[tuple[np.ndarray, np.ndarray]]) -> int:
    """Covered time of intervals handed over chunk by chunk in start order (union_chunks()' total), no union kept."""
    return sum(int((ge - gs).sum()) for gs, ge in union_groups(chunks))


def covered_and_resumes(chunks: Iterable[tuple[np.ndarray, np.ndarray]], min_ns: int) -> tuple[int, np.ndarray]:
    """covered_chunks(), and where the intervals resume after a hole of at least min_ns: the starts of the merged
    intervals that follow one (the first one too)."""
    total, last_end, resumes = 0, None, []
    for gs, ge in union_groups(chunks):
        if not gs.size:
            continue
        total += int((ge - gs).sum())
        before = np.concatenate(([gs[0] - max(min_ns, 1) if last_end is None else last_end], ge[:-1]))
        resumes.append(gs[gs - before >= max(min_ns, 1)])
        last_end = ge[-1]
    return total, np.concatenate(resumes) if resumes else np.zeros(0, np.int64)


def length(s: np.ndarray, e: np.ndarray) -> int:
    """The summed length of the intervals, CHUNK at a time (no temporary as long as them)."""
    return sum(int((ce - cs).sum()) for cs, ce in in_chunks(s, e))


def in_chunks(s: np.ndarray, e: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Views of s and e, CHUNK at a time."""
    for k in range(0, s.size, CHUNK):
        yield s[k:k + CHUNK], e[k:k + CHUNK]


class Coverage:
    """Covered time of a union of disjoint sorted intervals, as a function of time: F(t) = |union ∩ (-inf, t]|."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        self.s, self.e = starts, ends

    @property
    def size(self) -> int:
        """How many intervals."""
        return int(self.s.size)

    def start_at(self, i: int) -> int:
        """Interval i's start."""
        return int(self.s[i])

    def slice(self, i: int, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Intervals i..j-1: (starts, ends)."""
        return self.s[i:j], self.e[i:j]

    @cached_property
    def before(self) -> np.ndarray:
        """Covered time before each interval (at() of a union up to CHUNK intervals; a longer one is worked out a
        chunk at a time, with no array as long as it: the busy union of a long capture holds tens of millions)."""
        out = np.empty(self.s.size, np.int64)
        done = 0
        for k in range(0, self.s.size, CHUNK):  # CHUNK lengths at a time: no temporary as long as the union
            j = min(k + CHUNK, self.s.size)
            np.cumsum(self.e[k:j] - self.s[k:j], out=out[k:j])
            out[k:j] += done - (self.e[k:j] - self.s[k:j])  # covered before each: the sum so far less its own
            done = int(out[j - 1] + self.e[j - 1] - self.s[j - 1])
        return out

    @cached_property
    def _chunk_before(self) -> np.ndarray:
        """Covered time before each CHUNK intervals' first one."""
        return chunk_before(in_chunks(self.s, self.e))

    @property
    def total(self) -> int:
        """Covered time of the whole union (ns)."""
        return length(self.s, self.e)

    def at(self, t) -> np.ndarray:
        """F(t) for each t: covered time up to t (ns)."""
        t = np.asarray(t, dtype=np.int64)
        if self.s.size == 0:
            return np.zeros(t.shape, dtype=np.int64)
        if self.s.size > CHUNK:
            return covered_at(t, self.s[::CHUNK], self._chunk_before, lambda k: self.slice(k * CHUNK, (k + 1) * CHUNK))
        i = np.searchsorted(self.s, t, side="right") - 1
        j = np.clip(i, 0, None)
        inside = np.minimum(t, self.e[j]) - self.s[j]
        return np.where(i >= 0, self.before[j] + inside, 0)

    def within(self, starts, ends) -> np.ndarray:
        """Covered time inside each [start, end)."""
        return self.at(ends) - self.at(starts)

    def touches(self, starts, ends) -> np.ndarray:
        """Whether each [start, end) overlaps the union: the first interval ending after `start` must begin
        before `end` (intervals are disjoint and sorted, so no later one can). One searchsorted, no float work."""
        starts = np.asarray(starts, dtype=np.int64)
        ends = np.asarray(ends, dtype=np.int64)
        if self.s.size == 0:
            return np.zeros(starts.shape, dtype=bool)
        i = np.searchsorted(self.e, starts, side="right")
        ok = i < self.s.size
        out = np.zeros(starts.shape, dtype=bool)
        out[ok] = self.s[i[ok]] < ends[ok]
        return out


def chunk_before(chunks: Iterable[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Covered time before each chunk of a disjoint sorted union handed over chunk by chunk."""
    sums = [int((e - s).sum()) for s, e in chunks]
    if not sums:
        return np.zeros(0, np.int64)
    return np.concatenate(([0], np.cumsum(sums, dtype=np.int64)[:-1])).astype(np.int64)


def covered_at(t: np.ndarray, firsts: np.ndarray, before: np.ndarray, chunk) -> np.ndarray:
    """Coverage.at() of a union held in chunks: firsts, each chunk's first start; before, the covered time before
    it; chunk(k) -> its (starts, ends). Each chunk the times fall in is looked at once, its own prefix sums made
    then: the same integers as the whole union's."""
    flat = t.ravel()
    out = np.zeros(flat.size, np.int64)
    k = np.searchsorted(firsts, flat, side="right") - 1  # the chunk of the last interval starting at or before t
    order = np.argsort(k, kind="stable")
    ks = k[order]
    for c in np.unique(ks[ks >= 0]).tolist():
        rows = order[np.searchsorted(ks, c, side="left"):np.searchsorted(ks, c, side="right")]
        s, e = chunk(c)
        q = flat[rows]
        i = np.searchsorted(s, q, side="right") - 1  # >= 0: q is at or after the chunk's first start
        lengths = e - s
        own = np.cumsum(lengths) - lengths
        out[rows] = before[c] + own[i] + np.minimum(q, e[i]) - s[i]
    return out.reshape(t.shape)


class SpilledCoverage:
    """A Coverage whose intervals lie in a temporary file (spill.Column), read back CHUNK at a time: what a long
    capture's busy union becomes once the device pass is done, so that the steps and the idle attribution read it
    a slice at a time. The same answers as the Coverage it was made from."""

    def __init__(self, starts: Column, ends: Column, firsts: np.ndarray, before: np.ndarray):
        self._s, self._e, self._firsts, self._before = starts, ends, firsts, before

    @classmethod
    def of(cls, cov: Coverage) -> "SpilledCoverage":
        """cov's intervals written out a chunk at a time (cov's arrays can then be let go)."""
        writer = CoverageWriter(cov.s.dtype)
        for s, e in in_chunks(cov.s, cov.e):
            writer.append(s, e)
        return writer.done()

    @property
    def size(self) -> int:
        """How many intervals."""
        return self._s.size

    def start_at(self, i: int) -> int:
        """Interval i's start."""
        return int(self._s.read(i, i + 1)[0])

    def slice(self, i: int, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Intervals i..j-1: (starts, ends), read from the file."""
        return self._s.read(i, j), self._e.read(i, j)

    def chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The intervals CHUNK at a time."""
        for k in range(0, self.size, CHUNK):
            yield self.slice(k, k + CHUNK)

    @property
    def total(self) -> int:
        """Covered time of the whole union (ns)."""
        return sum(int((e - s).sum()) for s, e in self.chunks())

    def at(self, t) -> np.ndarray:
        """F(t) for each t: covered time up to t (ns)."""
        t = np.asarray(t, dtype=np.int64)
        if self.size == 0:
            return np.zeros(t.shape, dtype=np.int64)
        return covered_at(t, self._firsts, self._before, lambda k: self.slice(k * CHUNK, (k + 1) * CHUNK))

    def within(self, starts, ends) -> np.ndarray:
        """Covered time inside each [start, end)."""
        return self.at(ends) - self.at(starts)


class CoverageWriter:
    """A SpilledCoverage written a part at a time (disjoint sorted intervals, in order), with the index it reads by:
    each CHUNK intervals' first start and the covered time before it; `total` so far."""

    def __init__(self, dtype=np.int64):
        self.starts, self.ends = Column(dtype), Column(dtype)
        self.firsts: list[int] = []
        self.before: list[int] = []
        self.total = 0

    def append(self, s: np.ndarray, e: np.ndarray) -> None:
        """Add intervals after those so far."""
        if not s.size:
            return
        n = self.starts.size
        at = np.arange(-(-n // CHUNK) * CHUNK, n + s.size, CHUNK) - n  # where a CHUNK of the whole begins
        lengths = e - s
        if at.size:
            covered = np.cumsum(lengths) - lengths  # covered before each, within this part
            self.firsts += s[at].tolist()
            self.before += (covered[at] + self.total).tolist()
        self.starts.append(s)
        self.ends.append(e)
        self.total += int(lengths.sum())

    def done(self) -> "SpilledCoverage":
        """The SpilledCoverage of every interval appended."""
        return SpilledCoverage(self.starts, self.ends, np.array(self.firsts, self.starts.dtype),
                               np.array(self.before, np.int64))


def gaps(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int, min_ns: int = 0) -> pd.DataFrame:
    """Holes of a disjoint sorted union inside [lo, hi), at least min_ns long (worked out CHUNK intervals at a
    time: the busy union can hold millions of intervals, and few holes are long)."""
    return gaps_of_chunks(in_chunks(starts, ends), lo, hi, min_ns)


def gaps_of_chunks(chunks: Iterable[tuple[np.ndarray, np.ndarray]], lo: int, hi: int, min_ns: int = 0
                   ) -> pd.DataFrame:
    """gaps() of a disjoint sorted union handed over chunk by chunk (a SpilledCoverage's chunks())."""
    keep_s, keep_e, last_end = [], [], lo  # the hole before each interval runs from the one before's end
    for s, e in chunks:
        if not s.size:
            continue
        gs, ge = np.maximum(np.concatenate(([last_end], e[:-1])), lo), np.minimum(s, hi)
        keep = (ge - gs) >= max(min_ns, 1)
        keep_s.append(gs[keep])
        keep_e.append(ge[keep])
        last_end = e[-1]
    tail_s, tail_e = max(last_end, lo), hi  # after the last interval (the whole window without one)
    if tail_e - tail_s >= max(min_ns, 1):
        keep_s.append(np.array([tail_s], np.int64))
        keep_e.append(np.array([tail_e], np.int64))
    gs = np.concatenate(keep_s) if keep_s else np.zeros(0, np.int64)
    ge = np.concatenate(keep_e) if keep_e else np.zeros(0, np.int64)
    return pd.DataFrame({"start_ns": gs, "end_ns": ge, "duration_ns": ge - gs})
