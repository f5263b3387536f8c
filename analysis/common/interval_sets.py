"""Set operations on unions of intervals (Union: starts and ends, sorted and disjoint, as intervals.union makes
them): the time in both, the time in one and not the other, which intervals another overlaps, the time covered.
Searched from the smaller side, no sort: idle time can hold millions of intervals."""
from __future__ import annotations

import numpy as np

from .intervals import union_sorted

Union = tuple[np.ndarray, np.ndarray]  # a union of disjoint [start, end) intervals, sorted: (starts, ends)


SMALL_SIDE = 8  # subtract(): when `a` has this many times more intervals than `b`, those `b` misses stay whole


def _pairs(a, b) -> tuple[np.ndarray, np.ndarray]:
    """Indices (ia, ib) of every overlapping pair of intervals of the disjoint sorted unions a and b, in time order
    (and grouped by ia). Binary searches from the smaller side, no sort: idle time can hold millions of intervals."""
    small, big = (b, a) if a[0].size >= b[0].size else (a, b)
    lo = np.searchsorted(big[1], small[0], side="right")  # the first big interval ending after the small one starts
    hi = np.searchsorted(big[0], small[1], side="left")   # the first big interval starting at or after its end
    row, k = _spread(np.maximum(hi - lo, 0))
    other = lo[row] + k
    return (other, row) if small is b else (row, other)


def _spread(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row i repeated counts[i] times: (the row of each copy, the copy's index within its row)."""
    row = np.repeat(np.arange(counts.size), counts)
    k = np.arange(row.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return row, k


def _canonical(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, non-overlapping intervals with touching ones merged (union_sorted, only when some touch)."""
    return (s, e) if s.size < 2 or bool((s[1:] > e[:-1]).all()) else union_sorted(s, e)


def overlapped(a, b) -> np.ndarray:
    """For each interval of the disjoint sorted union `a`, whether an interval of union `b` overlaps it: searched
    from b's side (few next to a's millions), each b marking its run of a with a difference array."""
    first = np.searchsorted(a[1], b[0], side="right")  # a's first interval ending after b's start
    last = np.searchsorted(a[0], b[1], side="left")    # a's first interval starting at or after b's end
    has = first < last
    marks = (np.bincount(first[has], minlength=a[0].size + 1)
             - np.bincount(last[has], minlength=a[0].size + 1))
    return np.cumsum(marks[:-1]) > 0


def intersect(a, b) -> tuple[np.ndarray, np.ndarray]:
    """Time in both of two disjoint sorted unions (each a (starts, ends) pair)."""
    ia, ib = _pairs(a, b)
    s, e = np.maximum(a[0][ia], b[0][ib]), np.minimum(a[1][ia], b[1][ib])
    keep = e > s
    return _canonical(s[keep], e[keep])


def subtract(a, b) -> tuple[np.ndarray, np.ndarray]:
    """Time in union `a` and not in union `b`: each interval of `a` that `b` overlaps cut into the pieces between
    the `b` intervals (memory grows with the overlaps, no sort)."""
    if b[0].size == 0:  # nothing to cut: no copy of millions of idle intervals
        return _canonical(a[0], a[1])
    ia, ib = _pairs(a, b)
    touched = np.zeros(a[0].size, dtype=bool)
    touched[ia] = True
    # per pair, the piece before its b interval: from a's start (first pair of that a) or the previous b's end
    first = np.ones(ia.size, dtype=bool)
    first[1:] = ia[1:] != ia[:-1]
    before_s = np.where(first, a[0][ia], b[1][np.maximum(ib - 1, 0)])
    last = np.ones(ia.size, dtype=bool)
    last[:-1] = ia[1:] != ia[:-1]
    # pieces: before each b (clipped to its a), and after the last b of each a
    ps = np.concatenate((np.maximum(before_s, a[0][ia]), b[1][ib[last]]))
    pe = np.concatenate((np.minimum(b[0][ib], a[1][ia]), a[1][ia[last]]))
    order = np.argsort(np.concatenate((np.arange(ia.size) * 2, np.flatnonzero(last) * 2 + 1)), kind="stable")
    ps, pe = ps[order], pe[order]  # time order: each a's pieces in turn
    keep = pe > ps
    ps, pe = ps[keep], pe[keep]
    whole = ~touched & ((a[1] > a[0]) | (a[0].size > SMALL_SIDE * b[0].size))  # zero-length: kept only there
    us, ue = a[0][whole], a[1][whole]
    return _canonical(*_merge_sorted((us, ue), (ps, pe)))


def _merge_sorted(a, b) -> tuple[np.ndarray, np.ndarray]:
    """Two lists of intervals, each sorted by start, as one sorted list (b after a on equal starts). np.insert does
    the same but sorts the positions first: several times slower on millions."""
    if b[0].size == 0:
        return a[0], a[1]
    pos = np.searchsorted(a[0], b[0], side="right") + np.arange(b[0].size)  # b's places in the merged list
    from_a = np.ones(a[0].size + b[0].size, dtype=bool)
    from_a[pos] = False
    pos_a = np.flatnonzero(from_a)  # a's places: integer scatters cost a third of boolean-mask ones on millions
    del from_a
    out = []
    for x, y in zip(a, b):
        merged = np.empty(pos_a.size + pos.size, dtype=np.result_type(x, y))
        merged[pos], merged[pos_a] = y, x
        out.append(merged)
    return out[0], out[1]


def total(u) -> int:
    """Covered time of a union of disjoint intervals (starts, ends) (ns)."""
    return int((u[1] - u[0]).sum())
