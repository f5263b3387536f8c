"""One API call per GPU operation: exports where several CUDA API rows share a (process, correlation id).

A public 2022.2 export of an MPI + CUDA program records each `cudaMemcpy` twice: the call and a nested
`cudaMemcpy_v3020` with the same correlation id. The fixture reproduces that on real exports with sqlite3 at test
time: every copy's (and every kernel launch's) API row gets a nested twin inside it, with a `_v3020`-style name.
"""
import sqlite3

import pytest

from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.summary import Options, analyze_sections
from conftest import ROOT
from test_against_nsys_stats import _local_copy, _stats

NESTED = {"CUPTI_ACTIVITY_KIND_MEMCPY": "cudaMemcpy_v3020", "CUPTI_ACTIVITY_KIND_KERNEL": "cudaLaunchKernel_v7000"}


def add_nested_api_rows(sqlite, gpu_table: str, nested_name: str) -> int:
    """For every API row behind a row of gpu_table, insert a nested twin: same thread and correlation id, starting
    1 ns later and ending 1 ns earlier, named nested_name. Returns the number of rows added."""
    con = sqlite3.connect(sqlite)
    try:
        cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_RUNTIME)")]
        (name_id,) = con.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM StringIds").fetchone()
        con.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (name_id, nested_name))
        exprs = {"start": "r.start + 1", "end": 'r."end" - 1', "nameId": str(name_id)}
        select = ", ".join(exprs.get(c, f'r."{c}"') for c in cols)
        names = ", ".join(f'"{c}"' for c in cols)
        cur = con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME ({names}) "
                          f"SELECT {select} FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r "
                          f"WHERE r.correlationId IN (SELECT correlationId FROM {gpu_table})")
        con.commit()
        return cur.rowcount
    finally:
        con.close()


def _altered(src, tmp_path, tables=("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_KERNEL")):
    path = _local_copy(src, tmp_path)
    added = {t: add_nested_api_rows(path, t, NESTED[t]) for t in tables}
    return path, added


def _dup_ids(path) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT COUNT(*) FROM (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                           "GROUP BY (globalTid >> 24) & 16777215, correlationId HAVING COUNT(*) > 1)").fetchone()[0]
    finally:
        con.close()


def _check_once(original, altered, added, nsys, tmp_path):
    assert added["CUPTI_ACTIVITY_KIND_MEMCPY"] > 0 and _dup_ids(altered) >= added["CUPTI_ACTIVITY_KIND_MEMCPY"]
    with Trace.open(original) as t:
        before = analyze_sections(t, Options(whole=True)).summary  # the whole capture: NVIDIA's totals below
        n_copies = len(t.device.memcpys)
        api_before = t.calls.memcpy_api
        kernel_ids = t.device.kernels["correlation_id"].head(500)
        launch_before = t.calls.launch_threads(kernel_ids)
    with Trace.open(altered) as t:
        api = t.calls.memcpy_api
        # one call per copy, and it is the outer call (the original row), not the nested twin
        assert len(api) == n_copies == len(api.drop_duplicates(["pid", "correlation_id"]))
        cols = ["pid", "correlation_id", "api_start_ns", "api_end_ns", "api_name", "sync"]
        assert api[cols].sort_values(cols[:2]).reset_index(drop=True).equals(
            api_before[cols].sort_values(cols[:2]).reset_index(drop=True))
        launch = t.calls.launch_threads(kernel_ids)
        assert not launch.duplicated(["pid", "correlation_id"]).any()
        assert launch.sort_values(cols[:2]).reset_index(drop=True).equals(
            launch_before.sort_values(cols[:2]).reset_index(drop=True))
        after = analyze_sections(t, Options(whole=True)).summary
    for kind in ("dtoh", "htod", "dtod"):
        for key in ("count", "bytes", "total_ns", "sync", "async", "blocking"):
            assert after["memcpy"][kind][key] == before["memcpy"][kind][key], (kind, key)
    assert after["gaps"]["top"] == before["gaps"]["top"]
    # and the totals are still NVIDIA's own
    ref = {r["Operation"]: r for r in _stats(nsys, altered, tmp_path / "stats")["cuda_gpu_mem_time_sum"]}
    for label, kind in (("[CUDA memcpy Device-to-Host]", "dtoh"), ("[CUDA memcpy Host-to-Device]", "htod")):
        if label in ref:
            assert int(ref[label]["Count"]) == after["memcpy"][kind]["count"]
            assert int(ref[label]["Total Time (ns)"]) == after["memcpy"][kind]["total_ns"]


def test_nested_api_rows_count_each_copy_once_h200(nsys, h200, tmp_path):
    altered, added = _altered(h200["baseline"], tmp_path)
    _check_once(h200["baseline"], altered, added, nsys, tmp_path)


def test_nested_api_rows_two_ranks(nsys, tmp_path):
    """Two processes whose correlation ids collide, each with nested twins: still one call per copy and process."""
    src = ROOT / "reports" / "data" / "h200x2" / "streams-x2.sqlite.xz"
    altered, added = _altered(src, tmp_path)
    _check_once(src, altered, added, nsys, tmp_path)


def test_nested_api_rows_public_sync_copies(nsys, public_traces, tmp_path):
    """The public 2024.5 CUDA export with synchronous `cudaMemcpy_v3020` copies, each given a nested twin."""
    src = next((p for p in public_traces if p.name.startswith("pipit")), None)
    if src is None:
        pytest.skip("pipit export not present")
    altered, added = _altered(src, tmp_path)
    _check_once(src, altered, added, nsys, tmp_path)


def test_outermost_call_is_kept():
    import pandas as pd

    from nsys_transfer.analysis.load.frames import outermost_calls
    api = pd.DataFrame({"pid": [1, 1, 1, 2], "correlation_id": [7, 7, 8, 7], "api_start_ns": [10, 11, 5, 10],
                        "api_end_ns": [20, 19, 6, 30], "api_name": ["outer", "inner", "other", "rank2"]})
    kept = outermost_calls(api, "api_start_ns", "api_end_ns")
    assert list(kept["api_name"]) == ["outer", "other", "rank2"]
    same_start = api.assign(api_start_ns=[10, 10, 5, 10])
    assert list(outermost_calls(same_start, "api_start_ns", "api_end_ns")["api_name"]) == ["outer", "other", "rank2"]
