"""Interval arithmetic (analysis/intervals.py) against a plain timeline of booleans, on random unions with
zero-length and touching intervals: the covered time must match instant by instant, and results are canonical."""
from __future__ import annotations

import numpy as np
import pytest

from nsys_transfer.analysis.gpu import device_pass, gpu_ops
from nsys_transfer.analysis.intervals import covered_sorted, gaps, intersect, subtract, union

SPAN = 400


def _random_union(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    s = rng.integers(0, SPAN, n)
    d = rng.integers(0, 25, n)
    d[rng.random(n) < 0.2] = 0  # zero-length calls exist in real traces
    return union(s, s + d)


def _holes(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Idle time as analysis/idle.py builds it: the holes around a busy union, touching at zero-length busy ones."""
    h = gaps(*_random_union(rng, n), 0, SPAN)
    return h["start_ns"].to_numpy(), h["end_ns"].to_numpy()


def _mask(u) -> np.ndarray:
    m = np.zeros(SPAN + 30, dtype=bool)
    for s, e in zip(*u):
        m[s:e] = True
    return m


def _canonical(u) -> bool:
    s, e = u
    return bool((e > s).all() and (s[1:] > e[:-1]).all())


@pytest.mark.parametrize("seed", range(40))
def test_intersect_and_subtract_match_a_timeline(seed):
    rng = np.random.default_rng(seed)
    for _ in range(25):
        a = _holes(rng, int(rng.integers(0, 80))) if rng.random() < 0.4 else _random_union(rng, int(rng.integers(0, 80)))
        b = _random_union(rng, int(rng.integers(0, 80)))
        both, only_a = intersect(a, b), subtract(a, b)
        assert (_mask(both) == (_mask(a) & _mask(b))).all()
        assert (_mask(only_a) == (_mask(a) & ~_mask(b))).all()
        assert _canonical(both)
        positive = only_a[1] > only_a[0]  # an untouched zero-length interval of a far larger `a` stays (counts)
        assert _canonical((only_a[0][positive], only_a[1][positive]))


@pytest.mark.parametrize("seed", range(20))
def test_covered_time_without_the_union_matches_a_timeline(seed):
    rng = np.random.default_rng(seed)
    for n in (0, 1, 2, 30, 200):
        s = np.sort(rng.integers(0, SPAN, n))
        e = s + rng.integers(0, 40, n)  # nested, overlapping, touching and zero-length intervals
        m = np.zeros(SPAN + 40, dtype=bool)
        for a, b in zip(s, e):
            m[a:b] = True
        assert covered_sorted(s, e) == int(m.sum())


def test_subtract_of_nothing_keeps_every_interval():
    a = (np.array([0, 10, 20]), np.array([5, 10, 30]))
    s, e = subtract(a, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
    assert s.tolist() == [0, 10, 20] and e.tolist() == [5, 10, 30]


def test_device_pass_takes_a_window_in_floats_as_in_integers():
    """The CLI passes integers; a Python caller may pass floats (the pass clips in place only for integers)."""
    import pandas as pd
    kernels = pd.DataFrame({"start_ns": [10, 40, 100], "end_ns": [30, 60, 150], "device": 0, "correlation_id": [1, 2, 3],
                            "pid": 7})
    ops = gpu_ops(kernels, pd.DataFrame(), pd.DataFrame())
    as_int, as_float = device_pass(ops, (0, 200), 5), device_pass(ops, (0.0, 200.0), 5)
    assert as_int.util["busy_ns"].tolist() == as_float.util["busy_ns"].tolist() == [90]
    assert as_int.gaps["duration_ns"].tolist() == as_float.gaps["duration_ns"].tolist() == [10, 10, 40, 50]


@pytest.mark.parametrize("stage", ["streams", "pinned"])
def test_copy_overlap_from_the_device_pass_equals_the_kernels_own(h200, stage):
    """copy_table's overlap with kernels from the device pass's kernel time at the copies (what analyze hands it) is
    the overlap built from every kernel row; in these stages copies do overlap kernels, so a wrong cut shows."""
    from nsys_transfer.analysis import Trace
    from nsys_transfer.analysis.copies import copy_table
    from nsys_transfer.analysis.gpu import analysis_window
    with Trace.open(h200[stage]) as t:
        ops = gpu_ops(t.kernels, t.memcpys, t.memsets)
        passed = device_pass(ops, analysis_window(ops), 1_000_000)
        own = copy_table(t.memcpys, t.memcpy_api, t.kernels)
        handed = copy_table(t.memcpys, t.memcpy_api, t.kernels, passed.kernels_at_copies)
        n_kernels = len(t.kernels)
    assert own["overlap_ns"].sum() > 0
    assert handed["overlap_ns"].tolist() == own["overlap_ns"].tolist()
    assert 0 < sum(c.s.size for c in passed.kernels_at_copies.values()) < n_kernels  # only the kernels at copies kept


@pytest.mark.parametrize("seed", range(20))
def test_kernels_at_copies_give_every_copy_its_kernel_time(seed):
    """The device pass's kernels at copies (binary searches over the running latest end) give each copy the same
    kernel time as the union of every kernel: overlapping, nested, zero-length kernels and copies."""
    from nsys_transfer.analysis.gpu import _kernels_at_copies
    from nsys_transfer.analysis.intervals import Coverage, union_sorted
    rng = np.random.default_rng(seed)
    ks = np.sort(rng.integers(0, SPAN, 300))
    ke = ks + rng.integers(0, 60, 300) * (rng.random(300) < 0.9) + (rng.random(300) < 0.02) * 400  # a few long ones
    cs = np.sort(rng.integers(0, SPAN, 40))
    ce = cs + rng.integers(0, 30, 40)
    at = _kernels_at_copies(ks, ke, cs, ce)
    assert at.within(cs, ce).tolist() == Coverage(*union_sorted(ks, ke)).within(cs, ce).tolist()


def test_kernels_at_copies_under_one_long_kernel_look_at_each_kernel_once():
    """One long kernel under many copies (a persistent or NCCL kernel beside short ones) makes every copy's candidate
    range reach back to it: the ranges are made disjoint, so the candidates stay within the kernels (found in
    review: they grew with copies x kernels, 3.7 GiB for 100 k kernels and 10 k copies)."""
    import tracemalloc
    from nsys_transfer.analysis.gpu import _kernels_at_copies
    ks = np.concatenate(([0], np.arange(1, 100_001) * 10))
    ke = np.concatenate(([2_000_000], ks[1:] + 5))
    cs = np.arange(10_000) * 100 + 3
    tracemalloc.start()
    at = _kernels_at_copies(ks, ke, cs, cs + 4)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert at.within(cs, cs + 4).tolist() == [4] * 10_000
    assert peak < 50 * 2 ** 20
