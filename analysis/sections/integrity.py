"""Can the trace be trusted? Consistency figures computed from the trace alone.

A capture can lose CUDA events without failing: nsys 2023.4 on a CUDA 13 driver recorded 35 kernels of a
Hugging Face `generate()` call that ran ~9,300 GPU operations, said "Importation succeeded with non-fatal errors",
and exported anyway. Every figure the analysis prints from such a trace is wrong. CUPTI pairs each GPU operation
with the API call that launched it by (process, correlation id), so a complete trace has, for every kernel launch,
copy and memset call, its GPU row, and the other way round; and a program whose CUDA events stop while its NVTX
ranges and OS runtime calls go on lost them.

`assess(trace)` returns (the summary carries it as `trace.integrity`; docs/json-schema.md):

    {"verdict": "complete" | "lossy",
     "lost_fraction": float in [0, 1] or None,   # share of the GPU operations the trace should hold and does not
     "evidence": str,                            # one sentence: what is missing and how much
     "figures": {...}}                           # the counts behind it (see FIGURES below)
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from nsys_transfer.nsys_core import nsys_messages
from nsys_transfer.nsys_core.driver import compare, parse_cuda

from nsys_transfer.analysis import intervals
from nsys_transfer.analysis.load import sql
from nsys_transfer.analysis.load.btree import Bits, In
from nsys_transfer.analysis.errors import TraceError
from nsys_transfer.analysis.load.kernel_digest import fits
from nsys_transfer.analysis.load.device import UNIFIED_KINDS
from nsys_transfer.analysis.load.frames import outermost_calls, pid_of
from nsys_transfer.analysis.load.trace import Trace

# --- thresholds -------------------------------------------------------------------------------------------------
# Share of the expected GPU operations (launch and copy API calls, or GPU rows) missing their other half before the
# trace is called lossy (and, below, the share of lost calls the other checks estimate). Complete real traces: 0 to
# 0.005 (the bundled H200 stages and 2-GPU runs, four public exports from nsys 2020.3 to 2025.3, three programs
# captured under nsys 2023.4 and 2024.2: at most a launch cut off at the capture's edge). The real lossy captures
# (nsys 2023.4 on CUDA 13) lost both halves of each call together, 34% and 98% of them, which the correlation-id
# check below measures. 5% leaves room for edge effects of short captures.
LOST_FRACTION_LOSSY = 0.05
# Fewer expected operations than this say nothing either way (a capture of 3 launches missing 1 is not evidence).
MIN_EXPECTED_OPS = 20
# Time check: the program's own NVTX ranges and OS runtime calls go on while its GPU operations stop. Rates are
# reported over TIMELINE_BINS equal bins of each process's span (GPU operations vs NVTX/OSRT events per second).
TIMELINE_BINS = 20
# A process whose GPU operations stop for good while at least this share of its NVTX/OSRT events still follows (and
# which ran at least MIN_GPU_OPS before) lost its tail. Complete traces: at most 0.09 (the bundled `multiproc` stage:
# post-processing after its last copy); the lossy capture: see docs/nsys-versions.md.
SILENT_TAIL_CPU_SHARE = 0.5
MIN_GPU_OPS = 100
# A process's own activity is its NVTX ranges when it has at least this many, else its OS runtime calls.
MIN_NVTX_RANGES = 20
# nsys 2024+ exports log "Number of CUDA events collected: N" (DIAGNOSTIC_EVENT): the exported CUDA rows (runtime +
# kernels + copies + memsets) equal N exactly in complete public exports; fewer rows than that lost some in import.
IMPORT_LOSS_LOSSY = 0.05
# Correlation ids: CUPTI numbers every CUDA API call of a process in order, the ones nsys does not record too (it
# skips some frequent calls), so a complete trace's ids have small holes and a lossy one has large ones. Largest
# hole between two GPU operations' ids in complete traces: 1,975 (lightning's model set-up); the lossy nsys 2023.4 /
# CUDA 13 captures: 32,656 (torchvision DataLoader loop) and 117,085 (transformers generate()). Above
# GPU_ID_GAP_SUSPECT the process's API ids are read and every hole of at least API_ID_GAP_LOST ids (complete
# traces: at most 425) during which the process kept running (NVTX or OS runtime events inside it) counts as lost
# calls, at the id density of the rest of the trace.
GPU_ID_GAP_SUSPECT = 5000
API_ID_GAP_LOST = 1000
# A capture cut out of a longer one (a time slice exported or trimmed by another tool) leaves calls whose GPU work fell
# past its end and GPU work whose calls came before its start: each kind's unpaired rows all at one edge. This share
# of them may stray from the edge and the cut is still named.
EDGE_SLACK = 0.05

# API names (version suffixes like _v7000 follow) whose call puts an operation on the GPU
KERNEL_API = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel", "cuLaunchCooperativeKernel",
              "cudaLaunch_v", "cuLaunchGrid")
GRAPH_API = ("cudaGraphLaunch", "cuGraphLaunch")
COPY_API = ("cudaMemcpy", "cuMemcpy")
MEMSET_API = ("cudaMemset", "cuMemset")
CAPTURE_BEGIN = re.compile(r"^cu(?:da)?StreamBeginCapture")
CAPTURE_END = re.compile(r"^cu(?:da)?StreamEndCapture")
KINDS = ["", "kernel", "graph", "copy", "memset", "capture_begin", "capture_end", "captured"]
COLLECTED = re.compile(r"Number of CUDA events collected:\s*(\d+)")

FIGURES = """figures:
  api: {kind: {calls, without_gpu}} for kind in kernel, graph, copy, memset (calls that returned an error, and
       launches made while their thread captured a CUDA graph, are left out: they run nothing)
  gpu: {kind: {rows, without_api}} for kernel, copy, memset
  expected_ops, missing_ops: kernel+graph+copy calls (the larger of API-side and GPU-side counts), and those without
       their other half
  shared_correlation_ids: {count, examples[]}: (process, correlation id) pairs held by several API rows (the
       outermost call is used everywhere)
  timeline[]: per process with CUDA calls: pid, bin_ns, start_ns, cuda_per_s[], cpu_per_s[], silent_bins,
       cuda_end_ns, cpu_events_after (NVTX+OSRT after its last CUDA event), cpu_share_after
  diagnostics: {cuda_events_collected, cuda_rows_exported, messages[]} from DIAGNOSTIC_EVENT (nsys 2024+)
  correlation_gaps: {largest_gpu_id_gap, checked, processes[]}: holes in a process's correlation ids while it
       kept running (pid, api_rows, id_span, largest_gap, gaps, gaps_while_running, ids_lost, est_missing_calls,
       missing_share); read only when the GPU operations' ids jump by more than GPU_ID_GAP_SUSPECT
  capture: {nsys_version, driver_cuda, nsys_newest_cuda, nsys_older_than_driver}: the exporting nsys against the
       driver the trace recorded (a risk, reported, not a verdict)
  graph_runs: of the kernel rows, CUDA graph launches traced whole (one GPU row each, paired with cudaGraphLaunch)
  migrations: unified-memory migrations (copyKind 11-13): the driver's, on page faults; in no count above
  edges: {calls_without_gpu, gpu_without_calls}: where each kind's unpaired rows sit among the paired ones (start,
       end, middle; unknown where the rows are out of time order; null: none); cut: every kind of them at an edge,
       as a time slice cut from a longer capture leaves them (said instead of "lost", with no nsys-version note)
"""


def assess(trace: Trace, pairs: bool = False, side: GpuSide | None = None, counts: dict | None = None) -> dict:
    """Verdict, lost fraction, one-sentence evidence and the figures behind them (module docstring).

    pairs: match every call to its GPU rows one by one even where the counts already agree (slower on big traces;
    `analyze-trace --check` does). side, counts: gpu_side(trace) and call_counts(trace), when the caller has them."""
    side = gpu_side(trace) if side is None else side
    gpu = side.ids
    n_gpu = {k: len(v[0]) for k, v in gpu.items()}
    kinds = _name_kinds(trace)
    counts = _call_counts(trace, kinds) if counts is None else counts
    fig: dict = {}
    if (not pairs and "capture_begin" not in kinds.values() and counts["graph"] == 0
            and counts["kernel"] == n_gpu["kernel"] and counts["copy"] == n_gpu["copy"]):
        # as many launch and copy calls as kernels and copies: the usual, complete case, decided from one scan of
        # the runtime table (millions of rows) without loading it. A mismatch, a graph launch or a stream capture
        # sends the trace to the pairing below.
        fig["method"] = "counts"
        fig["api"] = {k: {"calls": counts[k], "without_gpu": max(0, counts[k] - n_gpu.get(k, counts[k]))}
                      for k in ("kernel", "graph", "copy", "memset")}
        fig["gpu"] = {k: {"rows": n, "without_api": max(0, n - counts[k])} for k, n in n_gpu.items()}
        missing_api = missing_gpu = 0
        fig["shared_correlation_ids"] = {"count": 0, "examples": []}
        fig["edges"] = {"calls_without_gpu": None, "gpu_without_calls": None}
    else:
        fig["method"] = "pairs"
        api, fig["shared_correlation_ids"] = _api_calls(trace, kinds)
        fig["api"], fig["gpu"], missing_api, missing_gpu, fig["edges"] = _pairing(trace, api, gpu, side.in_order)
    expected_api = sum(fig["api"][k]["calls"] for k in ("kernel", "graph", "copy"))
    expected_gpu = n_gpu["kernel"] + n_gpu["copy"]
    fig["expected_ops"] = int(max(expected_api, expected_gpu))
    fig["missing_ops"] = int(max(missing_api, missing_gpu))
    fig["timeline"] = side.timeline
    fig["correlation_gaps"] = _id_gaps(trace, gpu, side.osrt_starts)
    fig["graph_runs"] = int(len(trace.device.graph_runs))
    fig["migrations"] = int(trace.device.memcpys["copy_kind"].isin(UNIFIED_KINDS).sum())
    # nsys's count of CUDA events holds the migrations and not the graph-trace rows (equal on real 2024 exports)
    fig["diagnostics"] = _diagnostics(trace, counts["all"] + sum(n_gpu.values()) + fig["migrations"]
                                      - fig["graph_runs"], {int(p) for v in gpu.values() for p in pd.unique(v[0])})
    fig["capture"] = _capture(trace)
    return _verdict(fig, missing_api, missing_gpu, expected_api, expected_gpu)


# --- loading --------------------------------------------------------------------------------------------------------
class GpuSide(NamedTuple):
    """What the checks keep of the GPU rows: kind -> (pid, correlation_id) arrays, and the timeline their times make
    (the times are let go after it: a long capture's kernel times are hundreds of MiB)."""
    ids: dict[str, tuple[np.ndarray, np.ndarray]]
    timeline: list[dict]
    osrt_starts: _OsrtStarts  # a process's OS call times, read once for the timeline and the id gaps
    in_order: dict[str, bool]  # kind -> whether its rows are in start order (their positions then stand for times)


def gpu_side(trace: Trace, gpu: dict | None = None) -> GpuSide:
    """GpuSide of gpu_rows(trace), or of the rows given (the NVTX ranges are read for the timeline)."""
    gpu = gpu_rows(trace) if gpu is None else gpu
    osrt_starts = _OsrtStarts(trace)
    in_order = {k: bool((v[2][1:] >= v[2][:-1]).all()) for k, v in gpu.items()}
    return GpuSide({k: v[:2] for k, v in gpu.items()}, _timeline(trace, gpu, osrt_starts), osrt_starts, in_order)


def gpu_rows(trace: Trace) -> dict[str, tuple[np.ndarray, ...]]:
    """kind -> (pid, correlation_id, start_ns, end_ns) arrays of the kernels (with the graph launches traced whole),
    the copies an API call made and the memsets (integers; the kernels' ids and processes in narrow types,
    KernelDigest.ops). Unified-memory migrations are left out: the driver makes them on page faults, with no call
    behind them (correlation id 0)."""
    copies = trace.device.memcpys
    migrations = copies["copy_kind"].isin(UNIFIED_KINDS).to_numpy()
    copies = copies[~migrations] if migrations.any() else copies
    return {kind: tuple(df[c].to_numpy() for c in ("pid", "correlation_id", "start_ns", "end_ns"))
            for kind, df in (("kernel", trace.device.kernel_digest.ops), ("copy", copies), ("memset", trace.device.memsets))}


def _name_kinds(trace: Trace) -> dict[int, str]:
    """String ids of the API names that put work on the GPU (and of stream-capture calls) -> their kind."""
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return {}
    rows = trace.query(sql.CUDA_CALL_NAMES)
    return {int(i): k for i, name in zip(rows["id"], rows["value"].astype(str)) for k in [_kind(name)] if k}


def _kind(name: str) -> str:
    """What a runtime call does: kernel, graph, copy, memset (by name prefix), capture_begin/_end, or ''."""
    for kind, prefixes in (("kernel", KERNEL_API), ("graph", GRAPH_API), ("copy", COPY_API), ("memset", MEMSET_API)):
        if name.startswith(prefixes):
            return kind
    for kind, pattern in (("capture_begin", CAPTURE_BEGIN), ("capture_end", CAPTURE_END)):
        if pattern.match(name):
            return kind
    return ""


CALL_KINDS = ("kernel", "graph", "copy", "memset")  # the GPU-work kinds _call_counts counts


def call_counts(trace: Trace) -> dict[str, int]:
    """Runtime calls of each GPU-work kind, and all runtime rows (one scan; see _call_counts)."""
    return _call_counts(trace, _name_kinds(trace))


def _call_counts_from_pass(trace: Trace, kinds: dict[int, str]) -> dict[str, int] | None:
    """_call_counts() from the runtime table's one pass (Trace.runtime_pass); None where the fast reader cannot."""
    both = trace.calls.runtime_pass()
    if both is None:
        return None
    out = {"all": sum(both.name_counts.values()), **dict.fromkeys(CALL_KINDS, 0)}
    for name_id, calls in both.name_counts.items():
        if kinds.get(name_id) in CALL_KINDS:
            out[kinds[name_id]] += calls
    return out


def _call_counts(trace: Trace, kinds: dict[int, str]) -> dict[str, int]:
    """Calls of each GPU-work kind, and all runtime rows, in one scan: a single CASE per row packs two counts into
    each 64-bit sum (low and high 32 bits), as fast as a bare scan of the column."""
    out = {"kernel": 0, "graph": 0, "copy": 0, "memset": 0, "all": 0}
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return out

    fast = _call_counts_from_pass(trace, kinds)
    if fast is not None:
        return out | fast

    def packed(low: str, high: str) -> str:
        whens = [f"WHEN {i} THEN {1 if k == low else 1 << 32}" for i, k in kinds.items() if k in (low, high)]
        return sql.PACKED_SUM.format(whens=" ".join(whens)) if whens else "0"
    row = trace.query(sql.PACKED_CALL_COUNTS.format(first=packed("kernel", "copy"),
                                                    second=packed("memset", "graph"))).iloc[0]
    a, b, n = (int(v) if v is not None and v == v else 0 for v in row)
    out.update(kernel=a & 0xFFFFFFFF, copy=a >> 32, memset=b & 0xFFFFFFFF, graph=b >> 32, all=n)
    return out


def _api_calls(trace: Trace, kinds: dict[int, str]) -> tuple[pd.DataFrame, dict]:
    """The GPU-work and stream-capture calls (pid, correlation_id, start_ns, end_ns, global_tid, kind, ok), one per
    (process, correlation id), and the shared-id figure: how many pairs several rows held before that."""
    cols = {"start_ns": "start", "end_ns": '"end"', "global_tid": "globalTid", "correlation_id": "correlationId",
            "name_id": "nameId"}
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in [*cols, "pid"]}).assign(
            kind=pd.Series(dtype=object), ok=pd.Series(dtype=bool)).drop(columns="name_id"), _shared(None)
    if "returnValue" in trace.columns("CUPTI_ACTIVITY_KIND_RUNTIME"):
        cols["ret"] = "returnValue"
    df = trace.reader.table_columns("CUPTI_ACTIVITY_KIND_RUNTIME", cols, (In("nameId", tuple(kinds)),))
    df["pid"] = pid_of(df["global_tid"].to_numpy())
    df["kind"] = pd.Categorical(df.pop("name_id").map(kinds).fillna(""), categories=KINDS)
    df["ok"] = (df.pop("ret").to_numpy() == 0) if "ret" in df else True  # a failed call runs nothing
    key = _key(df["pid"].to_numpy(), df["correlation_id"].to_numpy(), True)
    ordered = np.sort(key)
    dup_keys = ordered[1:][ordered[1:] == ordered[:-1]]
    shared = {"count": 0, "examples": []}
    if dup_keys.size:
        # a nested twin of a call (same process and correlation id) stands for nothing of its own: keep the outermost
        dup = _isin(key, dup_keys[np.r_[True, dup_keys[1:] != dup_keys[:-1]]])
        shared = _shared(df[dup])
        df = pd.concat([df[~dup], outermost_calls(df[dup], "start_ns", "end_ns")]).sort_index().reset_index(drop=True)
    capture = _in_capture(df)
    df.loc[capture & df["kind"].isin(["kernel", "copy", "memset"]).to_numpy(), "kind"] = "captured"
    return df, shared


def _in_capture(df: pd.DataFrame) -> np.ndarray:
    """Rows made by a thread between its cudaStreamBeginCapture and cudaStreamEndCapture: recorded into a graph,
    not run (their kernels run later under the cudaGraphLaunch's correlation id)."""
    out = np.zeros(len(df), dtype=bool)
    begins = df[df["kind"] == "capture_begin"]
    if begins.empty:
        return out
    ends = df[df["kind"] == "capture_end"]
    tids, starts = df["global_tid"].to_numpy(), df["start_ns"].to_numpy()
    for tid, b in begins.groupby("global_tid"):
        e = np.sort(ends.loc[ends["global_tid"] == tid, "start_ns"].to_numpy())
        rows = np.flatnonzero(tids == tid)
        t = starts[rows]
        for start in b["start_ns"].to_numpy():
            j = np.searchsorted(e, start)
            stop = e[j] if j < len(e) else np.iinfo(np.int64).max
            out[rows[(t > start) & (t < stop)]] = True
    return out


def _key(pid: np.ndarray, corr: np.ndarray, by_pid: bool) -> np.ndarray:
    return (pid.astype(np.int64) << 40) + corr.astype(np.int64) if by_pid else corr.astype(np.int64)


def _isin(values: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """values in sorted_keys, by binary search (np.isin/np.unique hash these packed keys pathologically slowly)."""
    if sorted_keys.size == 0:
        return np.zeros(values.shape, dtype=bool)
    i = np.searchsorted(sorted_keys, values)
    return sorted_keys[np.minimum(i, sorted_keys.size - 1)] == values


# --- figures --------------------------------------------------------------------------------------------------------
def _pairing(trace: Trace, rows: pd.DataFrame, gpu: dict, in_order: dict[str, bool]):
    """Each GPU-work call against the GPU rows by (process, correlation id), and each GPU row against the calls.
    Exports without globalPid (pid -1 on GPU rows) pair by correlation id alone."""
    by_pid = all((v[0] >= 0).all() for v in gpu.values())
    gpu_key = {k: _key(v[0], v[1], by_pid) for k, v in gpu.items()}
    gpu_keys = np.sort(np.concatenate(list(gpu_key.values())))
    api_keys = np.sort(_key(rows["pid"].to_numpy(), rows["correlation_id"].to_numpy(), by_pid))
    api_fig, gpu_fig = {}, {}
    missing_api = 0
    for kind in ("kernel", "graph", "copy", "memset"):
        calls = rows[(rows["kind"] == kind).to_numpy() & rows["ok"].to_numpy()]
        without = int((~_isin(_key(calls["pid"].to_numpy(), calls["correlation_id"].to_numpy(), by_pid),
                               gpu_keys)).sum())
        api_fig[kind] = {"calls": int(len(calls)), "without_gpu": without}
        if kind != "memset":  # zero-byte memsets run nothing (80 of 94 in the public cuDF export): not evidence
            missing_api += without
    has_runtime = trace.has("CUPTI_ACTIVITY_KIND_RUNTIME")
    orphan = {k: ~_isin(v, api_keys) for k, v in gpu_key.items()}
    if has_runtime and any(o.any() for o in orphan.values()):
        # launched through an API not listed here? look at every runtime row before calling a GPU row orphaned
        every = trace.reader.table_columns("CUPTI_ACTIVITY_KIND_RUNTIME", {"tid": "globalTid", "corr": "correlationId"})
        all_keys = np.sort(_key(pid_of(every["tid"].to_numpy()), every["corr"].to_numpy(), by_pid))
        orphan = {k: o & ~_isin(gpu_key[k], all_keys) for k, o in orphan.items()}
    missing_gpu = 0
    for kind, o in orphan.items():
        gpu_fig[kind] = {"rows": int(len(o)), "without_api": int(o.sum()) if has_runtime else None}
        if kind != "memset" and has_runtime:
            missing_gpu += int(o.sum())
    calls = rows[rows["kind"].isin(["kernel", "graph", "copy"]).to_numpy() & rows["ok"].to_numpy()]
    lonely_calls = ~_isin(_key(calls["pid"].to_numpy(), calls["correlation_id"].to_numpy(), by_pid), gpu_keys)
    # the GPU rows' times are gone by now (the device pass may write over them): in start order, positions serve
    sides = {_edge(np.arange(o.size), o) if in_order.get(k) else "unknown" for k, o in orphan.items()
             if k != "memset" and o.any()} if has_runtime else set()
    edges = {"calls_without_gpu": _edge(calls["start_ns"].to_numpy(), lonely_calls),
             "gpu_without_calls": sides.pop() if len(sides) == 1 else ("middle" if sides else None)}
    return api_fig, gpu_fig, missing_api, missing_gpu, edges


def _edge(starts: np.ndarray, lonely: np.ndarray) -> str | None:
    """Where the rows without their other half sit among the rest: 'start' or 'end' when (but for EDGE_SLACK of
    them) they all come before or after every paired row, as a time slice cut from a longer capture leaves them;
    'middle' when they are mixed in, as lost events are; None when there are none."""
    if not lonely.any():
        return None
    if lonely.all():
        return "middle"
    alone, paired = np.sort(starts[lonely]), starts[~lonely]
    k = min(alone.size - 1, int(alone.size * EDGE_SLACK))
    if alone[alone.size - 1 - k] <= paired.min():
        return "start"
    if alone[k] >= paired.max():
        return "end"
    return "middle"


def _shared(dup: pd.DataFrame | None) -> dict:
    """(process, correlation id) pairs held by several GPU-work calls (dup: those calls), with the first few."""
    if dup is None or dup.empty:
        return {"count": 0, "examples": []}
    groups = dup.sort_values("start_ns", kind="stable").groupby(["pid", "correlation_id"], sort=False)
    return {"count": int(groups.ngroups),
            "examples": [{"pid": int(p), "correlation_id": int(c), "rows": int(len(g))}
                         for (p, c), g in list(groups)[:3]]}


class _OsrtStarts(dict):
    """pid -> sorted start times of its OS runtime calls (-1: every process), read on first use."""

    def __init__(self, trace: Trace):
        super().__init__()
        self.trace = trace

    def __missing__(self, pid: int) -> np.ndarray:
        self[pid] = self.trace.osrt.starts((In(Bits("globalTid"), (pid,)),) if pid >= 0 else ())
        return self[pid]


def _timeline(trace: Trace, gpu: dict, osrt_starts: _OsrtStarts) -> list[dict]:
    """Per process that ran GPU work: its GPU operations and its own activity per second over its span, and how much
    of that activity follows its last GPU operation. Its activity: its NVTX ranges (the program's own marks of work)
    where it has at least MIN_NVTX_RANGES, else its OS runtime calls (read only then, one column)."""
    kinds = [(v[0], v[2], v[3]) for v in gpu.values() if v[0].size]  # (pid, start, end) per kind: no concatenation
    if not kinds:
        return []
    nvtx = trace.host.nvtx
    nvtx_pid, nvtx_t = pid_of(nvtx["global_tid"].to_numpy(np.int64)), nvtx["start_ns"].to_numpy(np.int64)
    out = []
    for p in sorted(set().union(*(pd.unique(pid).tolist() for pid, _, _ in kinds))):
        # each kind's rows of this process; all of them, without a copy, in the usual one-process trace
        mine = [(s, e) if p < 0 or bool((pid == p).all()) else (s[pid == p], e[pid == p]) for pid, s, e in kinds]
        mine = [(s, e) for s, e in mine if s.size]
        cpu, source = (nvtx_t[nvtx_pid == p] if p >= 0 else nvtx_t), "nvtx"
        if cpu.size < MIN_NVTX_RANGES:
            cpu, source = osrt_starts[int(p)], "osrt"
        first, gpu_end = min(int(s.min()) for s, _ in mine), max(int(e.max()) for _, e in mine)
        lo = int(min(first, cpu.min() if cpu.size else first))
        hi = int(max(gpu_end, cpu.max() if cpu.size else 0)) + 1
        bin_ns = max(1, -(-(hi - lo) // TIMELINE_BINS))
        gpu_n = sum(np.bincount((s[k:k + intervals.CHUNK] - lo) // bin_ns, minlength=TIMELINE_BINS)[:TIMELINE_BINS]
                    for s, _ in mine for k in range(0, s.size, intervals.CHUNK))  # bounded temporaries
        cpu_n = np.bincount((cpu - lo) // bin_ns, minlength=TIMELINE_BINS)[:TIMELINE_BINS]
        after = int((cpu > gpu_end).sum())
        out.append({"pid": int(p), "start_ns": lo, "bin_ns": int(bin_ns), "activity": source,
                    "gpu_ops": int(sum(s.size for s, _ in mine)), "cpu_events": int(cpu.size),
                    "gpu_ops_per_s": [round(float(x) * 1e9 / bin_ns, 1) for x in gpu_n],
                    "cpu_events_per_s": [round(float(x) * 1e9 / bin_ns, 1) for x in cpu_n],
                    "gpu_end_ns": gpu_end, "cpu_events_after": after,
                    "cpu_share_after": round(after / cpu.size, 4) if cpu.size else 0.0})
    return out


def _process_activity(trace: Trace, pid: int, osrt_starts: _OsrtStarts) -> np.ndarray:
    """Sorted start times of a process's NVTX ranges and OS runtime calls."""
    nvtx = trace.host.nvtx
    mine = nvtx["start_ns"].to_numpy(np.int64)[pid_of(nvtx["global_tid"].to_numpy(np.int64)) == pid]
    return np.sort(np.concatenate((mine, osrt_starts[int(pid)])))


def _pids_in_order(gpu: dict) -> list[int]:
    """The processes of the GPU rows in order of first appearance (kernels, then copies, then memsets)."""
    seen: dict[int, None] = {}
    for pid, *_ in gpu.values():
        seen.update(dict.fromkeys(pd.unique(pid).tolist()))
    return list(seen)


def _largest_id_gap(gpu: dict, p: int) -> int | None:
    """The largest hole between a process's sorted positive correlation ids (p < 0: every row's), from one sorted
    copy of them (millions of GPU rows in a long capture); None with fewer than two ids."""
    parts = [corr if p < 0 or bool((pid == p).all()) else corr[pid == p] for pid, corr, *_ in gpu.values()]
    narrow = all(fits(x, np.int32) for x in parts)  # 32 bits where they fit: half the copy (tens of millions of ids)
    ids = (np.concatenate([x.astype(np.int32 if narrow else np.int64, copy=False) for x in parts]) if parts else
           np.zeros(0, np.int64))
    ids.sort()
    ids = ids[np.searchsorted(ids, 0, side="right"):]  # the positive ids: a view
    if ids.size < 2:
        return None
    steps = [(k, min(k + intervals.CHUNK, ids.size - 1)) for k in range(0, ids.size - 1, intervals.CHUNK)]
    return max(int((ids[k + 1:j + 1] - ids[k:j]).max()) for k, j in steps) - 1  # differences CHUNK at a time


def _id_gaps(trace: Trace, gpu: dict, osrt_starts: _OsrtStarts) -> dict:
    """Holes in each process's correlation ids while it kept running: API calls (with their GPU work) never
    recorded. Read only where the GPU operations' own ids jump by more than GPU_ID_GAP_SUSPECT."""
    out = {"largest_gpu_id_gap": 0, "checked": False, "processes": []}
    suspects = []
    for p in _pids_in_order(gpu):
        largest = _largest_id_gap(gpu, p)
        if largest is None:
            continue
        out["largest_gpu_id_gap"] = max(out["largest_gpu_id_gap"], largest)
        if largest > GPU_ID_GAP_SUSPECT and p >= 0:
            suspects.append(p)
    if not suspects or not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return out
    out["checked"] = True
    rt = trace.reader.table_columns("CUPTI_ACTIVITY_KIND_RUNTIME", {"tid": "globalTid", "corr": "correlationId",
                                                           "start_ns": "start"})
    rt_pid = pid_of(rt["tid"].to_numpy())
    for p in suspects:
        mine = rt_pid == p
        order = np.argsort(rt["corr"].to_numpy()[mine], kind="stable")
        ids = rt["corr"].to_numpy()[mine][order]
        starts = rt["start_ns"].to_numpy()[mine][order]
        keep = ids > 0
        ids, starts = ids[keep], starts[keep]
        if ids.size < 2:
            continue
        holes = np.diff(ids) - 1
        big = np.flatnonzero(holes >= API_ID_GAP_LOST)
        activity = _process_activity(trace, p, osrt_starts)
        lo, hi = np.minimum(starts[big], starts[big + 1]), np.maximum(starts[big], starts[big + 1])
        inside = np.searchsorted(activity, hi) - np.searchsorted(activity, lo, side="right")
        running = big[inside > 0]
        span = int(ids[-1] - ids[0] + 1)
        lost_ids = int(holes[running].sum())
        share = lost_ids / span  # the share of the process's calls that fell into the holes
        # recorded calls per id elsewhere, applied to the holes (on the real captures within 25% of the count a
        # newer nsys recorded for the same program)
        missing = int(round(ids.size * share / (1 - share))) if share < 1 else None
        out["processes"].append({
            "pid": int(p), "api_rows": int(ids.size), "id_span": span, "largest_gap": int(holes.max()),
            "gaps": int(big.size), "gaps_while_running": int(running.size), "ids_lost": lost_ids,
            "est_missing_calls": missing, "missing_share": round(share, 4)})
    return out


def _diagnostics(trace: Trace, exported: int, gpu_pids: set[int]) -> dict:
    """nsys's own messages stored in the export (2024+): warnings and errors, each "no CUDA/NVTX events" one said of
    which process and whether the rows bear it out; and its count of CUDA events."""
    out = {"cuda_events_collected": None, "cuda_rows_exported": int(exported), "messages": []}
    if not trace.has("DIAGNOSTIC_EVENT"):
        return out
    pid = sql.PID_OF.format(col="globalPid") if "globalPid" in trace.columns("DIAGNOSTIC_EVENT") else "NULL"
    try:
        found = trace.query(sql.DIAGNOSTICS.format(pid=pid))
    except TraceError:
        return out
    found["text"] = [_reconciled(str(t), p, trace, gpu_pids) for t, p in zip(found["text"], found["pid"])]
    collected = [int(m.group(1)) for t in found["text"].astype(str) for m in [COLLECTED.search(t)] if m]
    if collected:
        out["cuda_events_collected"] = int(sum(collected))
    warn = found[found["severity"].isin([2, 3])]  # ENUM_DIAGNOSTIC_SEVERITY_LEVEL: 2 Warning, 3 Error
    out["messages"] = [" ".join(str(t).split())[:300] for t in warn["text"].drop_duplicates().head(20)]
    return out


NO_EVENTS = re.compile(r"^No (CUDA|NVTX) events collected")


def _reconciled(text: str, pid, trace: Trace, gpu_pids: set[int]) -> str:
    """nsys says "No CUDA events collected" (or NVTX) once per process: say which, and whether the trace's rows agree
    (the GPU work is another process's) or contradict it."""
    m = NO_EVENTS.match(text)
    if not m or pid is None or pid != pid:
        return text
    pid, what = int(pid), m.group(1)
    if what == "CUDA":
        others = sorted(gpu_pids - {pid})
        if pid in gpu_pids:
            return f"{text} [about process {pid}, yet the trace holds its GPU work: the message contradicts the rows]"
        return f"{text} [about process {pid}, which runs no GPU work" + (
            f"; the GPU work is process {', '.join(map(str, others))}'s]" if others else "]")
    nvtx_pids = set(pid_of(trace.host.nvtx["global_tid"].to_numpy(np.int64)).tolist()) if len(trace.host.nvtx) else set()
    if pid in nvtx_pids:
        return f"{text} [about process {pid}, yet the trace holds its NVTX ranges: the message contradicts the rows]"
    return f"{text} [about process {pid}, which marks no NVTX ranges" + (
        "; the ranges are other processes'" if nvtx_pids else "") + "]"


def _capture(trace: Trace) -> dict:
    """The nsys that exported the trace against the driver it recorded (TARGET_INFO_SYSTEM_ENV.CudaDriverVersion):
    an nsys older than the driver is a risk, not proof (the bundled H200 stages: 2023.4 on CUDA 13.0, complete)."""
    out = {"nsys_version": trace.nsys_version, "driver_cuda": None, "nsys_newest_cuda": None,
           "nsys_older_than_driver": None}
    driver = None
    if trace.has("TARGET_INFO_SYSTEM_ENV"):
        try:
            found = trace.query(sql.DRIVER_VERSION)
        except TraceError:
            found = None
        if found is not None and len(found):
            driver = parse_cuda(found["value"].iloc[0])
    m = re.match(r"(\d{4})\.(\d+)", trace.nsys_version)
    if m:
        c = compare(trace.nsys_version, (int(m.group(1)), int(m.group(2))), driver)
        out.update(driver_cuda=c["driver_cuda"], nsys_newest_cuda=c["nsys_newest_cuda"],
                   nsys_older_than_driver=c["older_than_driver"] if driver else None)
    elif driver:
        out["driver_cuda"] = f"{driver[0]}.{driver[1]}"
    return out


# --- verdict --------------------------------------------------------------------------------------------------------
def _verdict(fig: dict, missing_api: int, missing_gpu: int, expected_api: int, expected_gpu: int) -> dict:
    reasons: list[tuple[float, str]] = []
    fractions: list[float] = []
    a = fig["api"]
    if expected_api >= MIN_EXPECTED_OPS:
        share = missing_api / expected_api
        fractions.append(share)
        if share > LOST_FRACTION_LOSSY:
            reasons.append((share, f"{missing_api:,} of {expected_api:,} kernel launch and copy calls "
                                   f"({share:.0%}) have no GPU activity (kernels {a['kernel']['without_gpu']:,} of "
                                   f"{a['kernel']['calls']:,}, copies {a['copy']['without_gpu']:,} of "
                                   f"{a['copy']['calls']:,})"))
    if expected_gpu >= MIN_EXPECTED_OPS and (expected_api or missing_gpu == 0):
        share = missing_gpu / expected_gpu
        fractions.append(share)
        if share > LOST_FRACTION_LOSSY:
            reasons.append((share, f"{missing_gpu:,} of {expected_gpu:,} kernels and copies ({share:.0%}) have no "
                                   "CUDA API call"))
    for tl in fig["timeline"]:
        # only the program's own NVTX ranges: OS runtime calls after the last GPU operation are ordinary (the last
        # step's post-processing, joining workers, unmapping memory at exit: 60% of the calls of a complete nsys 2024.2
        # capture of stage baseline on the H200 came after its last copy)
        if tl["activity"] == "nvtx" and tl["gpu_ops"] >= MIN_GPU_OPS and tl["cpu_share_after"] >= SILENT_TAIL_CPU_SHARE:
            # at the process's rate of GPU operations per NVTX/OSRT event before the stop, the share of its events
            # that follow is also the share of its GPU operations missing
            reasons.append((tl["cpu_share_after"], f"process {tl['pid']}'s GPU operations stop while "
                                                 f"{tl['cpu_share_after']:.0%} of its NVTX/OS runtime events "
                                                 f"({tl['cpu_events_after']:,}) follow"))
    for g in fig["correlation_gaps"]["processes"]:
        if g["missing_share"] > LOST_FRACTION_LOSSY:
            reasons.append((g["missing_share"], f"{g['ids_lost']:,} of process {g['pid']}'s {g['id_span']:,} CUDA API "
                                                f"correlation ids ({g['missing_share']:.0%}) fall in "
                                                f"{g['gaps_while_running']} holes of {API_ID_GAP_LOST:,}+ ids (up to "
                                                f"{g['largest_gap']:,}) while it kept running: about "
                                                f"{g['est_missing_calls'] or 0:,} API calls and their GPU work are "
                                                f"missing beside the {g['api_rows']:,} recorded"))
    d = fig["diagnostics"]
    if d["cuda_events_collected"]:
        share = max(0.0, 1 - d["cuda_rows_exported"] / d["cuda_events_collected"])
        fractions.append(share)
        if share > IMPORT_LOSS_LOSSY:
            reasons.append((share, f"nsys collected {d['cuda_events_collected']:,} CUDA events but the export holds "
                                   f"{d['cuda_rows_exported']:,} ({share:.0%} lost)"))
    lost = round(max(fractions), 4) if fractions else None
    if reasons:
        reasons.sort(key=lambda r: -r[0])
        lost = round(max([lost or 0.0] + [r[0] for r in reasons]), 4)
        cut = _cut_at(fig["edges"])
        fig["cut"] = bool(cut)
        return {"verdict": "lossy", "lost_fraction": lost, "evidence": _lossy_evidence(fig, reasons, cut),
                "figures": fig}
    if not (expected_api or expected_gpu):
        evidence = "No CUDA kernel launches or copies in the trace: nothing to cross-check."
    else:
        evidence = (f"Every check passed: {fig['missing_ops']:,} of {fig['expected_ops']:,} kernels and copies lack "
                    "their API call or GPU row, and GPU operations go on as long as the program's own activity"
                    + _capture_note(fig) + ".")
    fig["cut"] = False
    return {"verdict": "complete", "lost_fraction": lost, "evidence": evidence, "figures": fig}


def _lossy_evidence(fig: dict, reasons: list[tuple[float, str]], cut: str | None) -> str:
    """The sentence of a lossy verdict: a cut from a longer capture where the edges say so, else lost events."""
    said = "; ".join(r for _, r in reasons)
    if cut:
        return (f"The export looks cut out of a longer capture (a time slice, trimmed or exported with a time range): "
                f"{cut}; {said}. Figures near its edges are incomplete: analyse the whole capture, or a --window well "
                "inside this one.")
    return "The capture lost CUDA events: " + said + _capture_note(fig) + "."


def _cut_at(edges: dict) -> str | None:
    """Where a cut left its marks, in words, when every kind of unpaired row sits at an edge; None otherwise."""
    calls, gpu = edges.get("calls_without_gpu"), edges.get("gpu_without_calls")
    if not (calls or gpu) or {calls, gpu} & {"middle", "unknown"}:
        return None
    words = {"start": "its start", "end": "its end"}
    said = ([f"the calls without GPU work all come at {words[calls]}"] if calls else []) + \
           ([f"the GPU work without calls all comes at {words[gpu]}"] if gpu else [])
    return " and ".join(said)


def _capture_note(fig: dict) -> str:
    c = fig["capture"]
    if not c["nsys_older_than_driver"]:
        return ""
    return (f" (exported by nsys {c['nsys_version']}, which traces CUDA {c['nsys_newest_cuda'].lstrip('<>=')} at "
            f"most, on a CUDA {c['driver_cuda']} driver)")


# --- analyze-trace --check ------------------------------------------------------------------------------------------
def capture_record_beside(trace_path) -> Path | None:
    """The run record `python -m nsys_transfer.profiling` writes beside its trace: runs/x/x.sqlite -> runs/x/x.run.json (per-rank
    traces x.rank0.sqlite share x.run.json)."""
    p = Path(trace_path)
    candidate = p.with_name(f"{p.name.split('.')[0]}.run.json")
    return candidate if candidate.is_file() else None


def record_messages(record: dict) -> list[dict]:
    """nsys's messages in a run record; records written before it kept them: parsed from its last lines."""
    if isinstance(record.get("nsys_messages"), list):
        return [m for m in record["nsys_messages"] if isinstance(m, dict) and "text" in m]
    return nsys_messages.parse("\n".join(str(x) for x in record.get("last_lines", []) or []), stage="last lines")


SPARK = " ▁▂▃▄▅▆▇█"


def _spark(values: list[float]) -> str:
    top = max(values) if values else 0
    return "".join(SPARK[0 if not v else max(1, round(v / top * (len(SPARK) - 1)))] for v in values) if top else \
        " " * len(values)


def check_report(result: dict, path: str, record_path=None, record: dict | None = None) -> tuple[str, bool]:
    """The text `analyze-trace --check` prints for one trace, and whether the trace is to be trusted: not when the
    figures say events were lost, nor when the run record beside it holds nsys errors (warnings are shown only)."""
    f = result["figures"]
    L = [f"{path}: {result['verdict'].upper()}"
         + (f", lost fraction {result['lost_fraction']:.1%}" if result["lost_fraction"] is not None else "")]
    L.append(f"  {result['evidence']}")
    c = f["capture"]
    driver = f"on a CUDA {c['driver_cuda']} driver" if c["driver_cuda"] else "driver not recorded"
    newest = f", traces CUDA {c['nsys_newest_cuda']}" if c["nsys_newest_cuda"] else ""
    L.append(f"  capture: nsys {c['nsys_version']}{newest}; {driver}"
             + ("  << nsys older than the driver" if c["nsys_older_than_driver"] else ""))
    L.append(f"  API calls vs GPU rows (paired by process and correlation id; method: {f['method']}):")
    for kind, label in (("kernel", "kernel launches"), ("graph", "graph launches"), ("copy", "memcpy calls"),
                        ("memset", "memset calls")):
        a = f["api"][kind]
        L.append(f"    {label:<16}{a['calls']:>10,}   without a GPU row {a['without_gpu']:>9,}")
    kernels = "kernels + graphs" if f.get("graph_runs") else "kernels"
    for kind, label in (("kernel", kernels), ("copy", "copies"), ("memset", "memsets")):
        g = f["gpu"][kind]
        w = "-" if g["without_api"] is None else f"{g['without_api']:,}"
        L.append(f"    {label:<16}{g['rows']:>10,}   without an API call {w:>7}")
    if f.get("graph_runs"):
        L.append(f"    ({f['graph_runs']:,} of the {kernels} are graph launches traced whole: one GPU row each)")
    if f.get("migrations"):
        L.append(f"    unified-memory migrations {f['migrations']:,}: made by the driver on page faults, with no API "
                 "call (not counted above)")
    sh = f["shared_correlation_ids"]
    L.append(f"    correlation ids held by several API calls: {sh['count']:,}"
             + (" (each GPU operation joins the outermost call)" if sh["count"] else ""))
    for tl in f["timeline"]:
        L.append(f"  process {tl['pid']}: GPU operations vs its {tl['activity'].upper()} events per second "
                 f"({TIMELINE_BINS} bins of {tl['bin_ns'] / 1e6:,.1f} ms)")
        L.append(f"    GPU ops |{_spark(tl['gpu_ops_per_s'])}| peak {max(tl['gpu_ops_per_s']):,.0f}/s, "
                 f"{tl['gpu_ops']:,} in all")
        cpu = tl["cpu_events_per_s"]
        L.append(f"    {tl['activity']:<7} |{_spark(cpu)}| peak {max(cpu):,.0f}/s, "
                 f"{tl['cpu_events']:,} in all; after the last GPU operation: {tl['cpu_events_after']:,} "
                 f"({tl['cpu_share_after']:.1%})")
    d = f["diagnostics"]
    if d["cuda_events_collected"] is not None:
        L.append(f"  nsys counted {d['cuda_events_collected']:,} CUDA events; "
                 f"the export holds {d['cuda_rows_exported']:,}")
    for m in d["messages"][:8]:
        L.append(f"  nsys (in the export): {m}")
    trusted = result["verdict"] == "complete"
    if record is not None:
        messages = record_messages(record)
        L.append(f"  run record {record_path}: " + (f"{len(messages)} nsys message(s)" if messages
                                                     else "no nsys warnings or errors"))
        for m in messages[:20]:
            L.append(f"    nsys {m.get('kind', 'message')} ({m.get('stage', '?')}): {m['text']}")
        if any(m.get("kind") == "error" for m in messages):
            trusted = False
    L.append(f"  => {'trusted' if trusted else 'NOT to be trusted'}")
    return "\n".join(L), trusted
