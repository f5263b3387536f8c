"""Our totals against NVIDIA's own `nsys stats` reports on the same real files."""
import csv
import shutil
import subprocess

import pytest

from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.sections.cpu import nvtx_summary
from conftest import ROOT

REPORTS = "cuda_gpu_kern_sum,cuda_gpu_mem_time_sum,nvtx_sum"


def _stats(nsys, sqlite, out_base):
    # nsys stats may write into the file it reads: give it a copy
    proc = subprocess.run([nsys.path, "stats", "--report", REPORTS, "--format", "csv", "--output", str(out_base),
                           "--force-export=false", str(sqlite)], capture_output=True, text=True, env=nsys.env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tables = {}
    for rep in REPORTS.split(","):
        path = out_base.parent / f"{out_base.name}_{rep}.csv"
        tables[rep] = list(csv.DictReader(open(path))) if path.exists() else []
    return tables


def _local_copy(path, tmp_path):
    from nsys_transfer.analysis.load.inputs import resolve_input
    local, _ = resolve_input(path)
    dst = tmp_path / "copy.sqlite"
    shutil.copyfile(local, dst)
    return dst


@pytest.mark.parametrize("name", ["baseline", "streams", "pinned", "multiproc", "pinned-long"])
def test_h200_totals_match_nsys_stats(nsys, h200, tmp_path, name):
    _check(nsys, _local_copy(h200[name], tmp_path), tmp_path)


@pytest.mark.parametrize("name", ["pinned-x2", "streams-x2"])
def test_two_rank_totals_match_nsys_stats(nsys, tmp_path, name):
    """One trace, two processes whose correlation ids collide: every copy still counted once."""
    _check(nsys, _local_copy(ROOT / "reports" / "data" / "h200x2" / f"{name}.sqlite.xz", tmp_path), tmp_path)


def test_public_totals_match_nsys_stats(nsys, public_traces, tmp_path):
    for p in public_traces:
        if p.name.startswith("nvtxex"):
            continue  # 2020.3 export: nsys 2023.4's stats scripts refuse its schema; the loader test covers it
        d = tmp_path / p.stem
        d.mkdir()
        _check(nsys, _local_copy(p, d), d)


def _check(nsys, sqlite, tmp_path):
    with Trace.open(sqlite) as t:
        kernels, memcpys, memsets, nvtx = t.device.kernels, t.device.memcpys, t.device.memsets, t.host.nvtx
        digest = t.device.kernel_digest  # what the analysis reads: the kernel table in one chunked pass
        graphs = t.device.graph_runs  # graph launches traced whole: in the digest as one row each, in no nsys kernel report
        has_enums = t.has("ENUM_CUDA_MEMCPY_OPER")
    ref = _stats(nsys, sqlite, tmp_path / "stats")
    k = ref["cuda_gpu_kern_sum"]
    assert sum(int(r["Total Time (ns)"]) for r in k) == kernels["duration_ns"].sum()
    assert sum(int(r["Instances"]) for r in k) == len(kernels)
    graph_ns = int(graphs["duration_ns"].sum())
    assert sum(int(r["Total Time (ns)"]) for r in k) == digest.total_ns - graph_ns == \
        digest.by_name["total_ns"].sum() - graph_ns
    assert sum(int(r["Instances"]) for r in k) == digest.count - len(graphs) == \
        digest.by_name["count"].sum() - len(graphs)
    assert len(graphs) == digest.graph_runs == _raw(sqlite, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
    if len(graphs):
        assert graph_ns == _raw(sqlite, 'SELECT SUM("end" - start) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE')
    # nsys groups by the full name, we by the short one: the extremes agree
    names = digest.by_name[~digest.by_name["name"].astype(str).str.match(r"^CUDA graph( \d+)?$")]
    assert max(int(r["Max (ns)"]) for r in k) == names["max_ns"].max()
    assert min(int(r["Min (ns)"]) for r in k) == names["min_ns"].min()
    ops = {r["Operation"]: r for r in ref["cuda_gpu_mem_time_sum"]}
    # nsys 2023.4's mem report skips exports without ENUM tables (made before 2023); nothing to compare there
    assert ops or not has_enums or memcpys.empty
    for label, kind in (("[CUDA memcpy Device-to-Host]", "DtoH"), ("[CUDA memcpy Host-to-Device]", "HtoD")):
        ours = memcpys[memcpys["copy_kind"] == kind]
        if label in ops:
            assert int(ops[label]["Count"]) == len(ours)
            assert int(ops[label]["Total Time (ns)"]) == ours["duration_ns"].sum()
        elif has_enums:
            assert ours.empty
    if "[CUDA memset]" in ops:
        assert int(ops["[CUDA memset]"]["Total Time (ns)"]) == (memsets["end_ns"] - memsets["start_ns"]).sum()
    ours = nvtx_summary(nvtx)
    ref_nvtx = {(r["Range"].lstrip(":"), r["Style"]): r for r in ref["nvtx_sum"]}
    assert len(ref_nvtx) == len(ours)
    for r in ours.itertuples():
        theirs = ref_nvtx[(r.name, r.kind)]
        assert int(theirs["Instances"]) == r.count
        assert int(theirs["Total Time (ns)"]) == r.total_ns


def _raw(sqlite, statement):
    """One number straight from SQLite (0 where the table is absent)."""
    import sqlite3
    con = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    try:
        return con.execute(statement).fetchone()[0] or 0
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()
