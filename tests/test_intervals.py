"""Interval arithmetic (analysis/common/intervals.py) against a plain timeline of booleans, on random unions with
zero-length and touching intervals: the covered time must match instant by instant, and results are canonical."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsys_transfer.analysis.sections.gpu import device_pass, gpu_ops
from nsys_transfer.analysis.common.interval_sets import intersect, subtract
from nsys_transfer.analysis.common.intervals import covered_chunks, gaps, in_chunks, union

SPAN = 400


def _random_union(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    s = rng.integers(0, SPAN, n)
    d = rng.integers(0, 25, n)
    d[rng.random(n) < 0.2] = 0  # zero-length calls exist in real traces
    return union(s, s + d)


def _holes(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Idle time as analysis/sections/idle.py builds it: the holes around a busy union, touching at zero-length busy ones."""
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


@pytest.mark.parametrize("chunk", [1, 3, 1 << 20])
@pytest.mark.parametrize("seed", range(20))
def test_covered_time_without_the_union_matches_a_timeline(seed, chunk, monkeypatch):
    from nsys_transfer.analysis.common import intervals
    monkeypatch.setattr(intervals, "CHUNK", chunk)
    rng = np.random.default_rng(seed)
    for n in (0, 1, 2, 30, 200):
        s = np.sort(rng.integers(0, SPAN, n))
        e = s + rng.integers(0, 40, n)  # nested, overlapping, touching and zero-length intervals
        m = np.zeros(SPAN + 40, dtype=bool)
        for a, b in zip(s, e):
            m[a:b] = True
        assert covered_chunks(in_chunks(s, e)) == int(m.sum())


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


def test_a_gap_ended_by_a_table_without_ids_has_none():
    """A caller's table without correlation_id or pid: the gap it ends names no next operation (-1), not the id of
    another kind's later operation (found in review)."""
    import pandas as pd
    kernels = pd.DataFrame({"start_ns": [0, 30], "end_ns": [10, 40], "device": 0, "correlation_id": [1, 2], "pid": 5})
    copies = pd.DataFrame({"start_ns": [20], "end_ns": [25], "device": [0]})
    g = device_pass(gpu_ops(kernels, copies, pd.DataFrame()), (0, 40), 1).gaps
    assert g[["start_ns", "next_correlation_id", "next_pid"]].to_numpy().tolist() == [[10, -1, -1], [25, 2, 5]]


@pytest.mark.parametrize("stage", ["streams", "pinned"])
def test_copy_overlap_from_the_device_pass_equals_the_kernels_own(h200, stage):
    """copy_table's overlap with kernels from the device pass's kernel time at the copies (what analyze hands it) is
    the overlap built from every kernel row; in these stages copies do overlap kernels, so a wrong cut shows."""
    from nsys_transfer.analysis import Trace
    from nsys_transfer.analysis.sections.copies import copy_table
    from nsys_transfer.analysis.sections.gpu import analysis_window
    with Trace.open(h200[stage]) as t:
        ops = gpu_ops(t.device.kernels, t.device.memcpys, t.device.memsets)
        passed = device_pass(ops, analysis_window(ops), 1_000_000)
        own = copy_table(t.device.memcpys, t.calls.memcpy_api, t.device.kernels)
        handed = copy_table(t.device.memcpys, t.calls.memcpy_api, t.device.kernels, passed.kernels_at_copies)
        n_kernels = len(t.device.kernels)
    assert own["overlap_ns"].sum() > 0
    assert handed["overlap_ns"].tolist() == own["overlap_ns"].tolist()
    assert 0 < sum(c.s.size for c in passed.kernels_at_copies.values()) < n_kernels  # only the kernels at copies kept


@pytest.mark.parametrize("seed", range(20))
def test_kernels_at_copies_give_every_copy_its_kernel_time(seed):
    """The device pass's kernels at copies (binary searches over the running latest end) give each copy the same
    kernel time as the union of every kernel: overlapping, nested, zero-length kernels and copies."""
    from nsys_transfer.analysis.sections.gpu import _kernels_at_copies
    from nsys_transfer.analysis.common.intervals import Coverage, union_sorted
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
    from nsys_transfer.analysis.sections.gpu import _kernels_at_copies
    ks = np.concatenate(([0], np.arange(1, 100_001) * 10))
    ke = np.concatenate(([2_000_000], ks[1:] + 5))
    cs = np.arange(10_000) * 100 + 3
    tracemalloc.start()
    at = _kernels_at_copies(ks, ke, cs, cs + 4)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert at.within(cs, cs + 4).tolist() == [4] * 10_000
    assert peak < 50 * 2 ** 20


@pytest.mark.parametrize("chunk", [1, 2, 5, 1 << 20])
@pytest.mark.parametrize("seed", range(30))
def test_union_in_chunks_matches_union_sorted(seed, chunk, monkeypatch):
    """union_chunks(), covered_chunks() and gaps() CHUNK intervals at a time equal union_sorted() and a timeline."""
    from nsys_transfer.analysis.common import intervals
    from nsys_transfer.analysis.common.intervals import union_chunks, union_sorted
    monkeypatch.setattr(intervals, "CHUNK", chunk)
    rng = np.random.default_rng(seed)
    s = np.sort(rng.integers(0, SPAN, rng.integers(0, 60)))
    e = s + rng.integers(0, 25, s.size) * (rng.random(s.size) < 0.8)  # zero-length ones too
    us, ue = union_chunks(in_chunks(s, e), s.size)
    ref = union_sorted(s, e)
    assert us.tolist() == ref[0].tolist() and ue.tolist() == ref[1].tolist()
    assert covered_chunks(in_chunks(s, e)) == int((ref[1] - ref[0]).sum())
    lo, hi = 5, SPAN + 20  # the holes between the union's intervals (a zero-length one splits a hole)
    cs, ce = np.clip(us, lo, hi), np.clip(ue, lo, hi)
    hs, he = np.r_[lo, ce], np.r_[cs, hi]
    want = [(int(a), int(b)) for a, b in zip(hs, he) if b - a >= 3]
    g = gaps(cs, ce, lo, hi, 3)
    assert list(zip(g["start_ns"].tolist(), g["end_ns"].tolist())) == want


@pytest.mark.parametrize("seed", range(30))
def test_union_sorted_matches_a_timeline_and_keeps_odd_intervals_as_given(seed):
    """union_sorted() takes each group's end from the running latest end; an interval that ends before it starts
    (no trace row does: analysis.load.validate drops them) still gets the group's largest end as given."""
    from nsys_transfer.analysis.common.intervals import union_sorted
    rng = np.random.default_rng(seed)
    s = np.sort(rng.integers(0, SPAN, 60))
    e = s + rng.integers(0, 25, 60)
    us, ue = union_sorted(s, e)
    m = np.zeros(SPAN + 30, dtype=bool)
    for a, b in zip(s, e):
        m[a:b] = True
    assert int((ue - us).sum()) == int(m.sum()) and bool((us[1:] > ue[:-1]).all())
    odd = e.copy()
    odd[rng.integers(0, 60, 3)] -= 40
    idx = np.flatnonzero(np.r_[True, s[1:] > np.maximum.accumulate(odd)[:-1]])
    us, ue = union_sorted(s, odd)
    assert us.tolist() == s[idx].tolist() and ue.tolist() == np.maximum.reduceat(odd, idx).tolist()


def _ops(rng, n: int, kind: int) -> pd.DataFrame:
    start = rng.integers(0, SPAN, n)  # few distinct starts: many ties inside and across kinds
    return pd.DataFrame({"start_ns": start, "end_ns": start + rng.integers(1, 30, n), "device": rng.integers(0, 2, n),
                         "correlation_id": kind * 1000 + np.arange(n), "pid": rng.integers(1, 4, n)})


def _one_table_pass(parts: list[pd.DataFrame], lo: int, hi: int, min_gap: int) -> tuple[list, list]:
    """The device pass from one table of every operation (stably sorted: kernels, then copies, then memsets on equal
    starts) and a timeline of booleans: (device, busy, compute) rows and the gap rows with their next operation."""
    every = pd.concat([p.assign(kind=i) for i, p in enumerate(parts)], ignore_index=True)
    util, gap_rows = [], []
    for dev in sorted(every["device"].unique()):
        ops = every[every["device"] == dev].sort_values("start_ns", kind="stable")
        s, e = np.clip(ops["start_ns"].to_numpy(), lo, hi), np.clip(ops["end_ns"].to_numpy(), lo, hi)
        busy, compute = np.zeros(hi - lo, dtype=bool), np.zeros(hi - lo, dtype=bool)
        for a, b, k in zip(s, e, ops["kind"]):
            busy[a - lo:b - lo] = True
            compute[a - lo:b - lo] |= k == 0
        util.append((int(dev), int(busy.sum()), int(compute.sum())))
        edges = np.flatnonzero(np.diff(np.r_[1, busy.astype(int), 1]))  # idle runs: [edges[0], edges[1]), ...
        for a, b in zip(edges[::2] + lo, edges[1::2] + lo):
            if b - a >= min_gap:
                nxt = np.flatnonzero(s >= b)
                row = ops.iloc[nxt[0]] if nxt.size else None
                gap_rows.append((int(dev), int(a), int(b), int(row["correlation_id"]) if row is not None else -1,
                                 int(row["pid"]) if row is not None else -1))
    return util, sorted(gap_rows, key=lambda g: (g[1], g[0]))


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 20])
@pytest.mark.parametrize("seed", range(30))
def test_device_pass_on_each_kind_equals_one_sorted_table(seed, chunk, monkeypatch):
    """device_pass() works on the kernel, copy and memset tables apart (GpuOps), CHUNK intervals at a time:
    utilisation, gaps and each gap's next operation (ties across kinds included) equal those of one sorted table of
    them all, in and around a window, whatever the chunk."""
    from nsys_transfer.analysis.common import intervals
    monkeypatch.setattr(intervals, "CHUNK", chunk)
    rng = np.random.default_rng(seed)
    parts = [_ops(rng, n, kind) for kind, n in enumerate(rng.integers(0, 25, 3))]
    lo, hi = sorted(rng.integers(0, SPAN + 30, 2)) if seed % 2 else (0, SPAN + 30)
    hi = max(hi, lo + 1)
    passed = device_pass(gpu_ops(*parts), (int(lo), int(hi)), 3)
    util, gap_rows = _one_table_pass(parts, int(lo), int(hi), 3)
    assert [tuple(int(x) for x in r) for r in passed.util[["device", "busy_ns", "compute_ns"]].to_numpy()] == util
    got = passed.gaps[["device", "start_ns", "end_ns", "next_correlation_id", "next_pid"]].to_numpy().tolist()
    assert sorted(map(tuple, got), key=lambda g: (g[1], g[0])) == gap_rows


@pytest.mark.parametrize("seed", range(10))
def test_median_of_kernel_times_is_pandas_median(seed):
    """kernel_digest.median() from one partitioned copy equals pandas' median, odd and even counts, repeats included."""
    from nsys_transfer.analysis.load.kernel_digest import median
    rng = np.random.default_rng(seed)
    for n in (1, 2, 3, 10, 11, 1000, 1001):
        values = rng.integers(0, 10 ** int(rng.integers(1, 12)), n)
        assert median(values) == float(pd.Series(values).median())


@pytest.mark.parametrize("seed", range(30))
def test_overlapped_marks_the_intervals_another_union_overlaps(seed):
    """interval_sets.overlapped(): each interval of `a` that some interval of `b` overlaps (a shared end is no overlap)."""
    from nsys_transfer.analysis.common.interval_sets import overlapped
    rng = np.random.default_rng(seed)
    a, b = _holes(rng, 40), _random_union(rng, int(rng.integers(0, 12)))
    want = [bool(((b[0] < ae) & (b[1] > as_)).any()) for as_, ae in zip(*a)]
    assert overlapped(a, b).tolist() == want


@pytest.mark.parametrize("chunk", [1, 2, 3, 1 << 20])
@pytest.mark.parametrize("seed", range(10))
def test_coverage_prefix_and_length_in_chunks(seed, chunk, monkeypatch):
    """Coverage.before (the covered time before each interval) and intervals.length, worked out CHUNK intervals at a
    time, equal their whole-array forms, and at() through them."""
    from nsys_transfer.analysis.common import intervals
    monkeypatch.setattr(intervals, "CHUNK", chunk)
    rng = np.random.default_rng(seed)
    s, e = _random_union(rng, int(rng.integers(0, 30)))
    cov = intervals.Coverage(s, e)
    lengths = e - s
    assert cov.before.tolist() == (np.cumsum(lengths) - lengths).tolist()
    assert cov.total == intervals.length(s, e) == int(lengths.sum())
    t = rng.integers(-5, 300, 20)
    assert cov.at(t).tolist() == [int(np.clip(np.minimum(e, x) - s, 0, None).sum()) for x in t]
