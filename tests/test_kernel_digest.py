"""The kernel table read a chunk at a time (analysis.load.kernel_digest.Builder) gives what the whole table gives, on real
traces; where it cannot (a table out of start order, rows to drop) the whole table is read instead; and the device
pass that writes the busy union over the kernel times (gpu.Spare) answers as the one that does not."""
from __future__ import annotations

import lzma
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.common import intervals
from nsys_transfer.analysis.sections import gpu
from nsys_transfer.analysis.load import kernel_digest
from nsys_transfer.analysis.load import osrt as osrt_module
from nsys_transfer.analysis.load import reader as reader_module

ROOT = Path(__file__).resolve().parent.parent
REAL = [ROOT / "reports/data/h200/pinned-long.sqlite.xz", ROOT / "reports/data/h200x2/pinned-x2.sqlite.xz",
        ROOT / "tests/data/programs/hf_generate_nsys2024.sqlite.xz",
        ROOT / "tests/data/programs/lightning_predict_nsys2023.sqlite.xz",
        ROOT / "tests/data/programs/torchvision_loader_nsys2024.sqlite.xz"]
K = "CUPTI_ACTIVITY_KIND_KERNEL"


def _same(chunked: kernel_digest.KernelDigest, whole: kernel_digest.KernelDigest) -> None:
    """Every figure of two digests equal (the ops' values, whatever their types)."""
    for c in kernel_digest.OPS:
        assert chunked.ops[c].to_numpy().astype(np.int64).tolist() == whole.ops[c].to_numpy().astype(np.int64).tolist()
    pd.testing.assert_frame_equal(chunked.by_name.astype({"name": str}), whole.by_name.astype({"name": str}),
                                  check_dtype=False)
    assert chunked.by_stream.to_dict() == whole.by_stream.to_dict()
    pd.testing.assert_frame_equal(chunked.by_owner, whole.by_owner, check_dtype=False)
    assert (chunked.count, chunked.total_ns, chunked.median_ns) == (whole.count, whole.total_ns, whole.median_ns)
    pd.testing.assert_frame_equal(chunked.top(5).astype({"name": str}), whole.top(5).astype({"name": str}))
    assert chunked.names() == whole.names() and chunked.compute_stream() == whole.compute_stream()
    pd.testing.assert_frame_equal(chunked.driving_process(), whole.driving_process(), check_dtype=False)


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name.split(".")[0])
@pytest.mark.parametrize("rows", [997, 1 << 20])
def test_chunked_digest_equals_the_whole_table(path, rows, monkeypatch):
    """Read `rows` rows at a time (997: many chunks, a group or name split across them), the digest equals the one
    made from the whole kernel table: rows, figures by name, stream and process, count, total and median."""
    monkeypatch.setattr(reader_module, "CHUNK_ROWS", rows)
    with Trace.open(path) as t:
        chunked = t.device._chunked_kernel_digest()
        assert chunked is not None, "a clean export in start order is read in chunks"
        _same(chunked, kernel_digest.of_frame(t.device.kernels))
        for c in kernel_digest.ONE_VALUE:  # one GPU or one process: a view of one value, no memory per kernel
            assert (chunked.ops[c].to_numpy().strides == (0,)) == (t.device.kernels[c].nunique() == 1)


def _export(tmp_path: Path, path: Path, *statements: str) -> Path:
    """A copy of a real export with these statements applied."""
    out = tmp_path / "trace.sqlite"
    with lzma.open(path) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    con = sqlite3.connect(out)
    for s in statements:
        con.execute(s)
    con.commit()
    con.close()
    return out


@pytest.mark.parametrize("statement", [
    f'UPDATE {K} SET start = start + 5000000, "end" = "end" + 5000000 WHERE rowid = 7',  # out of start order
    f"INSERT INTO {K} SELECT * FROM {K} WHERE rowid = 9",                                # a row repeated
    f'UPDATE {K} SET "end" = start - 1 WHERE rowid = 11'])                            # a row ending before it starts
def test_tables_the_chunks_cannot_take_are_read_whole(statement, tmp_path):
    """A kernel table out of start order, or with a row validate.clean drops, is read whole: the digest, and the
    warnings, are the whole table's."""
    path = _export(tmp_path, REAL[0], statement)
    with Trace.open(path) as t:
        assert t.device._chunked_kernel_digest() is None
        digest, said = t.device.kernel_digest, list(t.warnings)
    with Trace.open(path) as t:
        _same(digest, kernel_digest.of_frame(t.device.kernels))
        assert said == t.warnings
    assert digest.spare_times is None


def test_wide_values_are_kept_whole(tmp_path):
    """Device ids and correlation ids beyond the narrow types, and several of each, come back exactly."""
    path = _export(tmp_path, REAL[0], f"UPDATE {K} SET deviceId = 300 WHERE rowid % 3 = 0",
                   f"UPDATE {K} SET correlationId = correlationId + 5000000000 WHERE rowid % 2 = 0",
                   f"UPDATE {K} SET globalPid = globalPid + (1 << 24) WHERE rowid > 100")
    with Trace.open(path) as t:
        chunked = t.device._chunked_kernel_digest()
        assert chunked is not None
        _same(chunked, kernel_digest.of_frame(t.device.kernels))
        assert chunked.ops["pid"].nunique() == 2 and chunked.ops["correlation_id"].max() > 5_000_000_000


def _sorted_ops(rng, n: int, kind: int) -> pd.DataFrame:
    start = np.sort(rng.integers(0, 300, n))  # few distinct starts: ties inside and across kinds
    return pd.DataFrame({"start_ns": start, "end_ns": start + rng.integers(1, 30, n), "device": 0,
                         "correlation_id": kind * 1000 + np.arange(n), "pid": rng.integers(1, 4, n)})


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 20])
@pytest.mark.parametrize("seed", range(25))
def test_device_pass_into_the_kernel_times_answers_the_same(seed, chunk, monkeypatch):
    """The busy union written over the kernel times (with room before them for the copies and memsets) gives the
    utilisation, gaps and next operations of the device pass that writes it apart; ready() comes before any write."""
    monkeypatch.setattr(intervals, "CHUNK", chunk)
    rng = np.random.default_rng(seed)
    kernels, copies, memsets = (_sorted_ops(rng, int(n), kind) for kind, n in enumerate(rng.integers(1, 30, 3)))
    room = len(copies) + len(memsets) + int(rng.integers(0, 3))
    times = {c: np.empty(room + len(kernels), np.int64) for c in ("start_ns", "end_ns")}
    for c, values in times.items():
        values[room:] = kernels[c].to_numpy()
    in_place = pd.DataFrame({**{c: kernels[c].to_numpy() for c in kernels}, **{c: v[room:] for c, v in times.items()}},
                            copy=False)  # the times as views, as KernelDigest.ops holds them
    seen = []
    spare = gpu.Spare(times["start_ns"], times["end_ns"],
                      lambda: seen.append(times["start_ns"][room:].tolist() == kernels["start_ns"].tolist()))
    window = (0, 340)
    apart = gpu.device_pass(gpu.gpu_ops(kernels, copies, memsets), window, 4)
    written = gpu.device_pass(gpu.gpu_ops(in_place, copies, memsets), window, 4, spare)
    assert written.wrote_spare and seen == [True]
    pd.testing.assert_frame_equal(written.util, apart.util)
    pd.testing.assert_frame_equal(written.gaps, apart.gaps)
    assert written.busy.s.tolist() == apart.busy.s.tolist() and written.busy.e.tolist() == apart.busy.e.tolist()


def test_device_pass_without_room_leaves_the_kernel_times_alone():
    """Kernel times without room before them for the other operations are not written over."""
    rng = np.random.default_rng(0)
    kernels, copies = _sorted_ops(rng, 20, 0), _sorted_ops(rng, 5, 1)
    times = {c: kernels[c].to_numpy().copy() for c in ("start_ns", "end_ns")}
    before = times["start_ns"].copy()
    spare = gpu.Spare(times["start_ns"], times["end_ns"], lambda: None)
    in_place = pd.DataFrame({**{c: kernels[c].to_numpy() for c in kernels}, **times}, copy=False)
    passed = gpu.device_pass(gpu.gpu_ops(in_place, copies, copies.iloc[0:0]), (0, 340), 4, spare)
    assert not passed.wrote_spare and times["start_ns"].tolist() == before.tolist()


@pytest.mark.parametrize("chunk", [1, 3, 1 << 20])
@pytest.mark.parametrize("seed", range(20))
def test_first_reaching_past_is_a_search_of_the_running_maximum(seed, chunk, monkeypatch):
    """gpu._first_reaching_past() equals searchsorted over np.maximum.accumulate, without holding it."""
    monkeypatch.setattr(intervals, "CHUNK", chunk)
    rng = np.random.default_rng(seed)
    s = np.sort(rng.integers(0, 100, int(rng.integers(1, 40))))
    e = s + rng.integers(0, 30, s.size)
    times = np.sort(rng.integers(-5, 140, int(rng.integers(0, 20))))
    want = np.searchsorted(np.maximum.accumulate(e), times, side="right")
    assert gpu._first_reaching_past(e, times).tolist() == want.tolist()


@pytest.mark.parametrize("chunk", [1, 3, 1 << 20])
@pytest.mark.parametrize("seed", range(20))
def test_covered_and_resumes(seed, chunk, monkeypatch):
    """intervals.covered_and_resumes(): the union's covered time, and its intervals that follow a hole of at least
    the threshold (and the first one)."""
    monkeypatch.setattr(intervals, "CHUNK", chunk)
    rng = np.random.default_rng(seed)
    s = np.sort(rng.integers(0, 200, int(rng.integers(1, 40))))
    e = s + rng.integers(0, 10, s.size)
    us, ue = intervals.union_sorted(s, e)
    total, resumes = intervals.covered_and_resumes(intervals.in_chunks(s, e), 5)
    holes = us[1:] - ue[:-1]
    assert total == int((ue - us).sum())
    assert resumes.tolist() == [int(us[0])] + us[1:][holes >= 5].tolist()


def test_waits_from_zones_equal_the_whole_table(monkeypatch):
    """The waiting calls read zone by zone and joined a column at a time (names from chunks whose categories differ)
    are the whole OS runtime table's calls of those names."""
    from nsys_transfer.analysis.sections import os_calls
    monkeypatch.setattr(reader_module, "CHUNK_ROWS", 1 << 10)
    monkeypatch.setattr(osrt_module, "ZONE_ROWS", 1 << 8)
    with Trace.open(REAL[4]) as t:
        waits = os_calls.wait_calls(t)
        names = set(os_calls.waited_names(t).values())
        whole = t.osrt.frame[t.osrt.frame["name"].astype(str).isin(names)].reset_index(drop=True)
    assert len(waits) > 1000 and list(waits.columns) == os_calls.WAIT_COLUMNS
    for c in ("start_ns", "end_ns", "global_tid"):
        assert waits[c].tolist() == whole[c].tolist()
    assert waits["name"].astype(str).tolist() == whole["name"].astype(str).tolist()


@pytest.mark.parametrize("sqlite_only", [False, True])
@pytest.mark.parametrize("path", REAL[:3], ids=lambda p: p.name.split(".")[0])
def test_kernels_touching_a_span_are_the_whole_tables(path, sqlite_only, monkeypatch):
    """trace.device.kernels_touching() (what the charts read) gives the kernels table's rows overlapping the span, through
    the page reader and through SQLite alone."""
    if sqlite_only:
        monkeypatch.setenv("NSYS_TRANSFER_SQLITE_ONLY", "1")
    rng = np.random.default_rng(len(path.name))
    with Trace.open(path) as t:
        k = t.device.kernels
        first, last = int(k["start_ns"].min()), int(k["end_ns"].max())
        for lo in rng.integers(first - 1000, last, 4):
            hi = int(lo + rng.integers(1, (last - first) // 3))
            want = k[(k["end_ns"] > lo) & (k["start_ns"] < hi)].drop(columns="name").reset_index(drop=True)
            got = t.device.kernels_touching(int(lo), hi)
            assert len(want) and got[list(want.columns)].equals(want)


def test_a_wide_single_value_then_another_is_kept_whole(tmp_path, monkeypatch):
    """A first chunk all on device 200 (beyond int8), then another device: both come back exactly."""
    monkeypatch.setattr(reader_module, "CHUNK_ROWS", 7)
    path = _export(tmp_path, REAL[0], f"UPDATE {K} SET deviceId = 200 WHERE rowid <= 400",
                   f"UPDATE {K} SET deviceId = 201 WHERE rowid > 400")
    with Trace.open(path) as t:
        chunked = t.device._chunked_kernel_digest()
        _same(chunked, kernel_digest.of_frame(t.device.kernels))


def test_a_window_cutting_only_a_copy_keeps_the_kernel_times(tmp_path):
    """--window cutting a copy but no kernel: the copies' kernel time is read from the kernels (not written over)."""
    from click.testing import CliRunner
    from nsys_transfer.analysis.cli.analyze import main
    out = tmp_path / "s.json"
    r = CliRunner().invoke(main, [str(ROOT / "reports/data/h200/pinned.sqlite.xz"), "--window", "10838417:440359941",
                                  "--json", str(out), "-q"])
    assert r.exit_code == 0, r.output
    assert out.exists()
