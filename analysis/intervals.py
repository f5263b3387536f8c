"""Interval arithmetic on numpy arrays: union, coverage function, gaps. Vectorised, no Python loops."""
from __future__ import annotations

import numpy as np
import pandas as pd


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
    new_group[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(new_group)
    return s[idx], np.maximum.reduceat(e, idx)


class Coverage:
    """Covered time of a union of disjoint sorted intervals, as a function of time: F(t) = |union ∩ (-inf, t]|."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        self.s, self.e = starts, ends
        self.before = np.concatenate(([0], np.cumsum(ends - starts)))[:-1] if starts.size else np.zeros(0, np.int64)

    @property
    def total(self) -> int:
        """Covered time of the whole union (ns)."""
        return int((self.e - self.s).sum())

    def at(self, t) -> np.ndarray:
        """F(t) for each t: covered time up to t (ns)."""
        t = np.asarray(t, dtype=np.int64)
        if self.s.size == 0:
            return np.zeros(t.shape, dtype=np.int64)
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


def gaps(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int, min_ns: int = 0) -> pd.DataFrame:
    """Holes of a disjoint sorted union inside [lo, hi), at least min_ns long."""
    gs = np.concatenate(([lo], ends))
    ge = np.concatenate((starts, [hi]))
    gs, ge = np.maximum(gs, lo), np.minimum(ge, hi)
    keep = (ge - gs) >= max(min_ns, 1)
    return pd.DataFrame({"start_ns": gs[keep], "end_ns": ge[keep], "duration_ns": (ge - gs)[keep]})


SMALL_SIDE = 8  # when one union has this many times fewer intervals, sweep only what it touches


def _combine(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], keep_b: bool):
    """Sweep over the boundaries of two disjoint sorted unions: the parts of `a` inside `b` (keep_b) or outside it."""
    (as_, ae), (bs, be) = a, b
    if as_.size == 0:
        return as_, ae
    t = np.concatenate((as_, ae, bs, be)).astype(np.int64)
    da = np.concatenate((np.ones(as_.size), -np.ones(ae.size), np.zeros(bs.size + be.size))).astype(np.int8)
    db = np.concatenate((np.zeros(as_.size + ae.size), np.ones(bs.size), -np.ones(be.size))).astype(np.int8)
    order = np.argsort(t, kind="stable")
    t, in_a, in_b = t[order], np.cumsum(da[order]) > 0, np.cumsum(db[order]) > 0
    # the state after each boundary holds until the next one
    keep = in_a[:-1] & (in_b[:-1] if keep_b else ~in_b[:-1]) & (t[1:] > t[:-1])
    return union_sorted(t[:-1][keep], t[1:][keep])


def _touching(big, small) -> np.ndarray:
    """Which intervals of the disjoint sorted union `big` overlap the union `small`."""
    return Coverage(*small).touches(*big)


def intersect(a, b) -> tuple[np.ndarray, np.ndarray]:
    """Time in both of two disjoint sorted unions (each a (starts, ends) pair)."""
    if a[0].size > SMALL_SIDE * b[0].size or b[0].size > SMALL_SIDE * a[0].size:
        big, small = (a, b) if a[0].size >= b[0].size else (b, a)
        hit = _touching(big, small)  # only the big side's intervals that touch the small side can intersect it
        return _combine((big[0][hit], big[1][hit]), small, True)
    return _combine(a, b, True)


def subtract(a, b) -> tuple[np.ndarray, np.ndarray]:
    """Time in union `a` and not in union `b`."""
    if a[0].size > SMALL_SIDE * b[0].size:
        hit = _touching(a, b)  # intervals of `a` that `b` does not touch stay whole
        cut = _combine((a[0][hit], a[1][hit]), b, False)
        s, e = np.concatenate((a[0][~hit], cut[0])), np.concatenate((a[1][~hit], cut[1]))
        order = np.argsort(s, kind="stable")  # two sorted runs: a linear merge
        return union_sorted(s[order], e[order])
    return _combine(a, b, False)


def total(u) -> int:
    """Covered time of a union of disjoint intervals (starts, ends) (ns)."""
    return int((u[1] - u[0]).sum())
