"""What a long capture keeps out of memory gives the same answers: the busy union in a temporary file
(intervals.SpilledCoverage, read back a slice at a time) and the correlation-id holes from a bitmap."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import golden_answers as answers
from nsys_transfer.analysis.common import intervals
from nsys_transfer.analysis.load import kernel_digest, ops_store
from nsys_transfer.analysis.sections import capture_activity, gpu, idle, streamed_pass
from nsys_transfer.analysis.common.spill import Column


def _union(rng, n):
    lengths = rng.integers(0, 6, n)
    s = np.cumsum(rng.integers(1, 5, n)) + np.r_[0, np.cumsum(lengths)[:-1]] if n else np.zeros(0, np.int64)
    return s.astype(np.int64), (s + lengths).astype(np.int64)


def test_a_column_reads_back_what_was_appended():
    col = Column(np.int32)
    col.append(np.arange(5))
    col.append(np.arange(5, 12))
    assert col.size == 12
    assert col.read(3, 9).tolist() == list(range(3, 9))
    assert col.read(10, 99).tolist() == [10, 11] and col.read(12, 20).size == 0
    col.close()


@pytest.mark.parametrize("chunk", [1, 2, 3, 1 << 20])
@pytest.mark.parametrize("seed", range(20))
def test_spilled_coverage_answers_as_the_coverage(seed, chunk, monkeypatch):
    monkeypatch.setattr(intervals, "CHUNK", chunk)
    rng = np.random.default_rng(seed)
    s, e = _union(rng, int(rng.integers(0, 40)))
    cov, spilled = intervals.Coverage(s, e), intervals.SpilledCoverage.of(intervals.Coverage(s, e))
    t = rng.integers(-5, int(e.max()) + 5 if s.size else 10, (3, 4))
    want = np.array([int(np.clip(np.minimum(e, x) - s, 0, None).sum()) for x in t.ravel()]).reshape(t.shape)
    assert cov.at(t).tolist() == spilled.at(t).tolist() == want.tolist()
    a, b = np.sort(rng.integers(0, 200, (2, 9)), axis=0)
    assert spilled.within(a, b).tolist() == cov.within(a, b).tolist()
    assert (spilled.size, spilled.total) == (cov.size, cov.total)
    for i in range(0, s.size, 3):
        assert spilled.start_at(i) == cov.start_at(i)
        assert [x.tolist() for x in spilled.slice(i, i + 4)] == [x.tolist() for x in cov.slice(i, i + 4)]


@pytest.mark.parametrize("window", [1, 2, 7, 1 << 26])
@pytest.mark.parametrize("seed", range(100))
def test_largest_id_gap_from_the_bitmap_equals_the_sorted_ids(seed, window, monkeypatch):
    monkeypatch.setattr(capture_activity, "ID_WINDOW", window)
    monkeypatch.setattr(intervals, "CHUNK", int(np.random.default_rng(seed).integers(1, 5)))
    rng = np.random.default_rng(seed)
    rows = {k: (rng.integers(1, 3, n), rng.integers(-2, int(rng.choice([3, 30, 1000])), n).astype(np.int32))
            for k in ("kernel", "copy", "memset") for n in [int(rng.integers(0, 12))]}
    for p in (-1, 1, 2):
        parts = [c if p < 0 else c[pid == p] for pid, c in rows.values()]
        ids = np.sort(np.concatenate(parts).astype(np.int64))
        ids = ids[ids > 0]
        assert capture_activity._largest_id_gap(rows, p) == (int(np.diff(ids).max()) - 1 if ids.size > 1 else None)


SPILLED = ["reports/data/h200/baseline.sqlite.xz", "reports/data/h200/pinned-long.sqlite.xz",
           "tests/data/programs/lightning_predict_nsys2023.sqlite.xz"]


@pytest.mark.parametrize("name", SPILLED)
def test_the_answers_with_every_busy_union_spilled_are_the_stored_ones(name, monkeypatch):
    """The JSON with the busy union in a temporary file from its first interval on (gpu.SPILL_INTERVALS: a few
    million on real long captures) and read back in slices of a few hundred intervals."""
    monkeypatch.setattr(gpu, "SPILL_INTERVALS", 0)
    monkeypatch.setattr(intervals, "CHUNK", 1000)
    monkeypatch.setattr(idle, "SEGMENT_INTERVALS", 700)
    stored = answers.load().get(name)
    if stored is None:
        pytest.skip("no stored answer")
    assert answers.answer(name) == stored


def test_frames_read_back_as_their_concatenation():
    """spill.Frames against the parts concatenated column by column (union_categoricals for the categories)."""
    from pandas.api.types import union_categoricals
    from nsys_transfer.analysis.common.spill import Frames
    rng = np.random.default_rng(0)
    names = np.array(["poll", "futex", "read", "mmap", "?"])
    parts = []
    for n in (5, 0, 7, 3):
        cats = pd.Index(list(rng.permutation(names)[:3]))
        parts.append(pd.DataFrame({"start_ns": rng.integers(0, 99, n).astype(np.int32 if n == 3 else np.int64),
                                   "name": pd.Categorical.from_codes(rng.integers(0, 3, n), categories=cats)}))
    frames = Frames(["start_ns", "name"], times=("start_ns", "start_ns"))
    for p in parts:
        frames.append(p)
    got = frames.frame()
    kept = [p for p in parts if len(p)]
    want = pd.DataFrame({"start_ns": np.concatenate([p["start_ns"].to_numpy() for p in kept]),
                         "name": union_categoricals([p["name"].array for p in kept])})
    pd.testing.assert_frame_equal(got, want)
    assert list(got["name"].cat.categories) == list(want["name"].cat.categories)
    assert Frames(["a"]).frame().columns.tolist() == ["a"]


@pytest.mark.parametrize("seed", range(20))
def test_frames_touching_hold_every_row_of_the_time_slice(seed):
    """Frames.touching(lo, hi): the rows starting before hi and ending after lo are all there, typed as frame()."""
    from nsys_transfer.analysis.common.spill import Frames
    rng = np.random.default_rng(seed)
    frames = Frames(["start_ns", "end_ns", "name"])
    for k in range(int(rng.integers(0, 6))):
        n = int(rng.integers(0, 8))
        s = np.sort(rng.integers(k * 50, k * 50 + 80, n))
        frames.append(pd.DataFrame({"start_ns": s, "end_ns": s + rng.integers(0, 30, n),
                                    "name": pd.Categorical(rng.choice(["poll", "futex", "read"], n))}))
    whole = frames.frame()

    def near(df, lo, hi):
        return df[(df["start_ns"] < hi) & (df["end_ns"] > lo)].reset_index(drop=True)
    for lo, hi in [(0, 10), (40, 120), (200, 230), (-5, 999)]:
        pd.testing.assert_frame_equal(near(frames.touching(lo, hi), lo, hi), near(whole, lo, hi))


@pytest.mark.parametrize("case", answers.keys(), ids=lambda c: "+".join(c))
def test_the_answers_with_the_kernels_and_memsets_in_files_are_the_stored_ones(case, monkeypatch):
    """The JSON with every kernel and memset table in temporary files (ops_store.SPILL_ROWS: 8 M rows on real long
    captures), read back a few hundred rows at a time, and the busy union written to a file as the streamed pass
    makes it: the answers of the pass in memory, on every bundled and public trace."""
    monkeypatch.setattr(ops_store, "SPILL_ROWS", 0)
    monkeypatch.setattr(ops_store, "READ_ROWS", 300)
    monkeypatch.setattr(intervals, "CHUNK", 500)
    monkeypatch.setattr(kernel_digest, "RADIX_BITS", 5)
    stored = answers.load().get(" + ".join(case))
    if stored is None:
        pytest.skip("no stored answer")
    assert answers.answer(*case) == stored


@pytest.mark.parametrize("bits", [1, 3, 16])
@pytest.mark.parametrize("seed", range(30))
def test_the_median_from_passes_over_chunks_is_the_median(seed, bits, monkeypatch):
    monkeypatch.setattr(kernel_digest, "RADIX_BITS", bits)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    d = rng.integers(0, int(rng.choice([2, 50, 1 << 40])), n)
    s = np.cumsum(rng.integers(0, 9, n))
    step = int(rng.integers(1, 8))
    chunks = lambda: ((s[k:k + step], s[k:k + step] + d[k:k + step]) for k in range(0, n, step))  # noqa: E731
    assert kernel_digest.chunked_median(chunks, n, int(d.max())) == kernel_digest.median(d) == float(np.median(d))


@pytest.mark.parametrize("seed", range(30))
def test_streams_merged_in_start_order_hold_every_interval_once(seed):
    rng = np.random.default_rng(seed)
    streams, every = [], []
    for _ in range(int(rng.integers(1, 4))):
        s = np.sort(rng.integers(0, 40, int(rng.integers(0, 30))))
        e = s + rng.integers(0, 5, s.size)
        step = int(rng.integers(1, 7))
        streams.append(iter([(s[k:k + step], e[k:k + step]) for k in range(0, s.size, step)]))
        every += list(zip(s.tolist(), e.tolist()))
    merged = list(streamed_pass._merged(streams))
    starts = np.concatenate([m[0] for m in merged]) if merged else np.zeros(0)
    assert (np.diff(starts) >= 0).all()
    assert sorted(p for m in merged for p in zip(m[0].tolist(), m[1].tolist())) == sorted(every)


def test_a_column_reads_as_an_array_where_code_needs_one():
    col = Column(np.int64)
    col.append(np.arange(100) * 3)
    assert (col.min(), col.max(), len(col), col[5:8].tolist()) == (0, 297, 100, [15, 18, 21])
    assert np.asarray(col).tolist() == (np.arange(100) * 3).tolist()
    col.close()
