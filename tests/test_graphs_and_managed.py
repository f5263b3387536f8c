"""CUDA graphs and unified memory, on real traces: a `torch.cuda.CUDAGraph` inference loop captured on the H200 with
nsys 2024.2 in both graph-trace modes, the same for a CuPy program on managed memory before and after its fix
(prefetching), and the public exports of a `torch.compile(mode="reduce-overhead")` program and a 4-GPU managed-memory
Monte Carlo code. Graph work is GPU time; migrations are a transfer kind of their own, never lost events."""
import sqlite3
from pathlib import Path

import pytest

from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.document import Document
from nsys_transfer.analysis.render.text import text_report
from nsys_transfer.analysis.rules.capture_checks import verdict
from nsys_transfer.analysis.sections.capture_figures import figures
from nsys_transfer.analysis.summary import Options, analyze_sections
from conftest import run_cli
from test_against_nsys_stats import _local_copy

DATA = Path(__file__).parent / "data" / "programs"


def _analyzed(path, whole=True):
    """The summary over the whole capture (the counts here are the tables' own), or over the steady state."""
    with Trace.open(path) as t:
        return analyze_sections(t, Options(whole=whole)).summary


@pytest.fixture(scope="module")
def runs(summary_of):
    names = ("cuda_graph_infer", "cuda_graph_node", "managed_memory", "managed_prefetch")
    return {n: summary_of(DATA / f"{n}_nsys2024.sqlite.xz", Options(whole=True)) for n in names}


def _rules(s):
    return {f["rule"] for f in s["diagnosis"]}


def _raw(path, statement):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(statement).fetchone()
    finally:
        con.close()


def test_graph_launches_traced_whole_are_gpu_work(runs, tmp_path):
    s = runs["cuda_graph_infer"]
    assert s["trace"]["integrity"]["verdict"] == "complete" and "incomplete-trace" not in _rules(s)
    g = s["kernels"]["graphs"]
    sqlite = _local_copy(DATA / "cuda_graph_infer_nsys2024.sqlite.xz", tmp_path)
    n, ns = _raw(sqlite, 'SELECT COUNT(*), SUM("end" - start) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE')
    assert (g["traced_as"], g["launches"], g["gpu_ns"]) == ("graph", 20, ns) and n == 20
    assert g["kernels_inside"] is None and 0.8 < g["share_of_kernel_time"] < 0.95
    # the kernel count is the kernel table's; the graph rows are counted as graphs
    assert s["kernels"]["count"] == _raw(sqlite, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    assert s["kernels"]["top"][0]["name"].startswith("CUDA graph")
    # past the set-up (the model's initialisation and the graph's capture) the replays are all the GPU work
    steady = _analyzed(DATA / "cuda_graph_infer_nsys2024.sqlite.xz", whole=False)
    assert steady["setup"]["duration_ns"] > 0 and steady["kernels"]["graphs"]["share_of_kernel_time"] == 1.0
    # no kernel row in it, yet GPU time: the text says where the kernels are rather than "kernels: 0, total 155 ms"
    assert steady["kernels"]["count"] == 0
    assert "\nkernels: none one by one (all inside CUDA graphs), total " in text_report(Document.from_json(steady), False)


def test_both_graph_trace_modes_tell_the_same_story(runs):
    """The same program traced twice: one row a launch, or the 1,100 kernels inside; the GPU time agrees."""
    whole, node = runs["cuda_graph_infer"], runs["cuda_graph_node"]
    gw, gn = whole["kernels"]["graphs"], node["kernels"]["graphs"]
    assert gn["traced_as"] == "node" and gn["launches"] == gw["launches"] == 20 and gn["kernels_inside"] == 1100
    assert abs(gw["gpu_ns"] - gn["gpu_ns"]) / gn["gpu_ns"] < 0.05
    assert abs(whole["gpu"]["utilization"] - node["gpu"]["utilization"]) < 0.05
    for s in (whole, node):
        assert s["gpu"]["utilization"] > 0.15 and s["steps"]["count"] == 20
        # the host makes each request's input with torch.randn on the CPU: that is where the GPU waits
        assert s["diagnosis"][0]["rule"] == "gpu-idle-cpu-bound"


def test_public_reduce_overhead_program_is_gpu_bound(public_traces):
    path = next(p for p in public_traces if p.name.startswith("zx3xyy"))
    s = _analyzed(path)
    assert s["gpu"]["utilization"] > 0.99 and s["trace"]["integrity"]["verdict"] == "complete"
    assert not _rules(s) & {"incomplete-trace", "gpu-idle-cpu-bound"}
    assert s["kernels"]["graphs"]["launches"] == 10 and s["kernels"]["graphs"]["share_of_kernel_time"] > 0.99


def test_graph_launches_pair_with_their_rows_in_check(tmp_path):
    path = DATA / "cuda_graph_infer_nsys2024.sqlite.xz"
    with Trace.open(path) as t:
        a = verdict(figures(t, pairs=True))
    assert a["figures"]["api"]["graph"] == {"calls": 20, "without_gpu": 0} and a["figures"]["graph_runs"] == 20
    d = a["figures"]["diagnostics"]
    assert d["cuda_events_collected"] == d["cuda_rows_exported"]  # nsys counts no graph-trace row
    r = run_cli("-m", "nsys_transfer.analysis", "--check", str(path))
    assert r.returncode == 0 and "graph launches traced whole" in r.stdout, r.stdout


def test_migrations_are_not_lost_events(runs):
    for name in ("managed_memory", "managed_prefetch"):
        with Trace.open(DATA / f"{name}_nsys2024.sqlite.xz") as t:
            a = verdict(figures(t, pairs=True))
        assert a["verdict"] == "complete" and a["figures"]["migrations"] > 4000, name
        d = a["figures"]["diagnostics"]
        assert d["cuda_events_collected"] == d["cuda_rows_exported"], name  # nsys's count holds the migrations
        assert "incomplete-trace" not in _rules(runs[name])


def test_on_demand_migrations_are_costed_and_the_prefetch_fix_removes_them(runs):
    before, after = runs["managed_memory"]["memcpy"]["unified"], runs["managed_prefetch"]["memcpy"]["unified"]
    assert before["cause_recorded"] and before["on_demand"]["count"] == before["htod"]["count"] + before["dtoh"]["count"]
    assert before["htod"]["count"] > 80_000 and before["on_demand"]["median_bytes"] < 64 << 10  # page by page
    assert after["on_demand"]["count"] == 0 and after["htod"]["on_demand"] == 0
    assert after["htod"]["count"] < before["htod"]["count"] / 20  # bulk prefetches of the same bytes and more
    f = next(f for f in runs["managed_memory"]["diagnosis"] if f["rule"] == "unified-memory")
    assert f["impact_ns"] == before["on_demand"]["gpu_ns"] and f["severity"] == "medium"
    assert "cudaMemPrefetchAsync" in f["suggestion"] and "pytorch" not in f["suggestion"].lower()
    assert "unified-memory" not in _rules(runs["managed_prefetch"])
    # the kernels no longer stall on page faults: their time falls from about 1.2 s to a few tens of ms
    assert runs["managed_prefetch"]["kernels"]["total_ns"] * 10 < runs["managed_memory"]["kernels"]["total_ns"]
    # the ordinary copy tables hold no migration
    for name in ("managed_memory", "managed_prefetch"):
        assert runs[name]["memcpy"]["dtoh"]["count"] == runs[name]["memcpy"]["htod"]["count"] == 0


def test_public_managed_memory_export(public_traces):
    path = next(p for p in public_traces if p.name.startswith("engpap"))
    s = _analyzed(path)
    u = s["memcpy"]["unified"]
    assert (u["htod"]["count"], u["dtoh"]["count"]) == (144, 48) and s["trace"]["integrity"]["verdict"] == "complete"
    # kernels of 136 ms: short gaps between them are not a launch problem
    assert "launch-bound" not in _rules(s) and s["kernels"]["median_ns"] > 100e6
